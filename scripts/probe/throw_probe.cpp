// Throws that unwind through a frame with a destructor to run, caught one frame up: what the
// extension modules do when they reject an argument. Loaded with ctypes by py-crash-probe.sh.
// echo_throw_probe(k, 0): a std::string to destroy; (k, 1): a std::ostringstream, as the
// reference module's find() has.
#include <sstream>
#include <stdexcept>
#include <string>

struct guard {
  std::string s;
  ~guard();
};
guard::~guard() { asm volatile("" ::: "memory"); }

[[gnu::noinline]] static int thrower(int k) {
  guard g{std::string(static_cast<size_t>(k) + 20, 'a')};
  if (k > 0) throw std::invalid_argument(g.s);
  return static_cast<int>(g.s.size());
}

[[gnu::noinline]] static int stream_thrower(int k) {
  std::ostringstream msg;
  msg << "probe " << k << " " << std::string(static_cast<size_t>(k) + 14, 'a');
  if (k > 0) throw std::invalid_argument(msg.str());
  return 0;
}

extern "C" __attribute__((visibility("default"))) int echo_throw_probe(int k, int stream) {
  try {
    return stream ? stream_thrower(k) : thrower(k);
  } catch (const std::exception& e) {
    return -static_cast<int>(std::string(e.what()).size());
  }
}
