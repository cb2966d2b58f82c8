#include "sizes.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

namespace echo_bench {

std::string human_bytes(size_t b) {
  char buf[32];
  if (b >= GiB && b % GiB == 0) std::snprintf(buf, sizeof buf, "%zuGiB", b / GiB);
  else if (b >= MiB && b % MiB == 0) std::snprintf(buf, sizeof buf, "%zuMiB", b / MiB);
  else if (b >= KiB && b % KiB == 0) std::snprintf(buf, sizeof buf, "%zuKiB", b / KiB);
  else std::snprintf(buf, sizeof buf, "%zuB", b);
  return buf;
}

size_t parse_size(const std::string& item, size_t max_bytes, size_t multiple_of) {
  size_t b = 0, e = item.size();
  while (b < e && std::isspace(static_cast<unsigned char>(item[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(item[e - 1]))) --e;
  const std::string s = item.substr(b, e - b);
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits]))) ++digits;
  if (digits == 0 || digits > 12) throw std::invalid_argument("'" + s + "' is not a size (digits, then K, M or G)");
  std::string suffix = s.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  size_t unit = 1;
  if (!suffix.empty() && suffix != "B") {
    const char u = suffix[0];
    unit = u == 'K' ? KiB : u == 'M' ? MiB : u == 'G' ? GiB : 0;
    const std::string rest = suffix.substr(1);
    if (unit == 0 || !(rest.empty() || rest == "B" || rest == "IB"))
      throw std::invalid_argument("'" + s + "': unknown suffix '" + s.substr(digits) + "' (K, M or G)");
  }
  const size_t v = std::stoull(s.substr(0, digits));
  if (v == 0) throw std::invalid_argument("'" + s + "': a size must be > 0");
  if (v > max_bytes / unit) throw std::invalid_argument("'" + s + "': at most " + human_bytes(max_bytes));
  const size_t bytes = v * unit;
  if (bytes % multiple_of != 0)
    throw std::invalid_argument("'" + s + "': not a multiple of the element size (" + std::to_string(multiple_of) + ")");
  return bytes;
}

std::vector<size_t> parse_sizes(const std::string& list, size_t max_bytes, size_t multiple_of) {
  std::vector<size_t> out;
  size_t pos = 0;
  while (true) {
    const size_t comma = list.find(',', pos);
    const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (item.find_first_not_of(" \t") == std::string::npos) {
      if (comma == std::string::npos && !out.empty()) break;  // tolerate one trailing comma
      throw std::invalid_argument("empty entry");
    }
    out.push_back(parse_size(item, max_bytes, multiple_of));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace echo_bench
