// echo_allreduce._reference: echo::reference::all_reduce on numpy arrays (host only: no GPU, no
// torch). The Python wrapper is echo_allreduce/reference.py; the table is table.hpp.
#include "table.hpp"
// add_shard_shards: generated (cmake/echo-shards.cmake).
#include "shards.inc"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <algorithm>

namespace nb = nanobind;
using namespace nb::literals;

namespace echo_py::ref {
namespace {

const std::vector<entry>& table() {
  static const std::vector<entry> t = [] {
    std::vector<entry> v;
    for (auto add : add_shard_shards) add(v);
    std::sort(v.begin(), v.end(), [](const entry& a, const entry& b) { return a.name.order < b.name.order; });
    return v;
  }();
  return t;
}

const entry& find(const std::string& quant, int bits, int group, bool rotate, int clip, const std::string& comp,
                  const std::string& storage) {
  for (const entry& e : table())
    if (matches(e.name, quant, bits, group, rotate, clip, comp, storage)) return e;
  throw no_entry("echo_allreduce.reference", quant, bits, group, rotate, clip, comp, storage,
                 "; compiled: see echo_allreduce.reference.instantiations()");
}

/// A fresh chain of the registered error-feedback storage named `storage`.
std::unique_ptr<chain_base> make_chain(int ranks, size_t capacity, const std::string& storage) {
  std::unique_ptr<chain_base> out;
  echo::for_each_registered<echo::tool::reference, echo::registered_compensators>([&](auto c, std::size_t) {
    using C = typename decltype(c)::type;
    if constexpr (C::keeps_state)
      if (!out && storage == echo::storage_name<C>()) out = std::make_unique<chain_impl<C>>(ranks, capacity);
  });
  if (!out) throw std::invalid_argument("echo_allreduce.reference.ChainState: no compiled error_feedback storage '" + storage + "'");
  return out;
}

/// The dtype an array of element type `t` must have.
void check_array(nb::dlpack::dtype d, echo::dtype t, const char* what, size_t index) {
  using code = nb::dlpack::dtype_code;
  bool ok = false;
  switch (t) {
    case echo::dtype::f32: ok = d == nb::dtype<float>(); break;
    case echo::dtype::f16: ok = d.code == static_cast<uint8_t>(code::Float) && d.bits == 16 && d.lanes == 1; break;
    case echo::dtype::bf16:  // carried as 16-bit integers (numpy has no bfloat16)
      ok = (d.code == static_cast<uint8_t>(code::UInt) || d.code == static_cast<uint8_t>(code::Int) ||
            d.code == static_cast<uint8_t>(code::Bfloat)) && d.bits == 16 && d.lanes == 1;
      break;
  }
  if (!ok)
    throw std::invalid_argument(std::string("echo_allreduce.reference: ") + what + "[" + std::to_string(index) +
                                "] has the wrong element type for dtype '" + echo::to_string(t) +
                                "' (float32, float16, or bf16 bits as uint16)");
}

echo::dtype parse_dtype(const std::string& s) {
  if (s == "f32") return echo::dtype::f32;
  if (s == "f16") return echo::dtype::f16;
  if (s == "bf16") return echo::dtype::bf16;
  throw std::invalid_argument("echo_allreduce.reference: dtype must be 'f32', 'f16' or 'bf16', got '" + s + "'");
}

using in_array = nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>;
using out_array = nb::ndarray<nb::c_contig, nb::device::cpu>;

/// The rank pointers of in and out after their checks: every input `in_n` elements, every output
/// `out_n`, of element type t.
void rank_pointers(const char* who, const std::vector<in_array>& in, const std::vector<out_array>& out, echo::dtype t,
                   size_t in_n, size_t out_n, std::vector<const void*>& ip, std::vector<void*>& op) {
  if (in.size() != out.size())
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(in.size()) + " inputs but " +
                                std::to_string(out.size()) + " outputs");
  ip.resize(in.size());
  op.resize(out.size());
  for (size_t r = 0; r < in.size(); ++r) {
    check_array(in[r].dtype(), t, "inputs", r);
    check_array(out[r].dtype(), t, "out", r);
    if (in[r].size() != in_n || out[r].size() != out_n)
      throw std::invalid_argument(std::string(who) + ": every input must have " + std::to_string(in_n) +
                                  " elements and every output " + std::to_string(out_n) + " (rank " + std::to_string(r) +
                                  " differs)");
    ip[r] = in[r].data();
    op[r] = out[r].data();
  }
}

/// A given chain must be of the call's ranks.
void check_chain(const char* who, const chain_base* chain, size_t ranks) {
  if (chain && chain->ranks() != static_cast<int>(ranks))
    throw std::invalid_argument(std::string(who) + ": the ChainState has " + std::to_string(chain->ranks()) + " ranks, the call " +
                                std::to_string(ranks));
}

void all_reduce(const std::vector<in_array>& in, const std::vector<out_array>& out, const std::string& dtype,
                const std::string& quant, int bits, int group, bool rotate, int clip, const std::string& comp,
                const std::string& storage, chain_base* chain, bool closes) {
  const char* who = "echo_allreduce.reference.all_reduce";
  const echo::dtype t = parse_dtype(dtype);
  const entry& e = find(quant, bits, group, rotate, clip, comp, storage);
  if (in.empty()) throw std::invalid_argument(std::string(who) + ": no inputs (one array per rank)");
  const size_t n = in[0].size();
  std::vector<const void*> ip;
  std::vector<void*> op;
  rank_pointers(who, in, out, t, n, n, ip, op);
  check_chain(who, chain, in.size());
  nb::gil_scoped_release release;
  e.run(t, ip, op, n, chain, closes);
}

/// reference::reduce_scatter: inputs of n elements each, outputs of n / P (rank r's segment).
void reduce_scatter(const std::vector<in_array>& in, const std::vector<out_array>& out, const std::string& dtype,
                    const std::string& quant, int bits, int group, bool rotate, int clip, const std::string& comp,
                    const std::string& storage, chain_base* chain) {
  const char* who = "echo_allreduce.reference.reduce_scatter";
  const echo::dtype t = parse_dtype(dtype);
  const entry& e = find(quant, bits, group, rotate, clip, comp, storage);
  if (!e.scatter)
    throw std::invalid_argument(std::string(who) + ": not compiled for this entry (the quantizers echo/registry.cuh "
                                "marks tool::reference_sp; not with storage step8 / step4, whose own segment has no step)");
  if (in.empty()) throw std::invalid_argument(std::string(who) + ": no inputs (one array per rank)");
  const size_t n = in[0].size(), P = in.size();
  if (n % P != 0)
    throw std::invalid_argument(std::string(who) + ": " + std::to_string(n) + " elements are not " + std::to_string(P) +
                                " equal segments");
  std::vector<const void*> ip;
  std::vector<void*> op;
  rank_pointers(who, in, out, t, n, n / P, ip, op);
  check_chain(who, chain, P);
  nb::gil_scoped_release release;
  e.scatter(t, ip, op, n, chain);
}

/// reference::all_gather: inputs of m elements each (rank r's segment), outputs of P m.
void all_gather(const std::vector<in_array>& in, const std::vector<out_array>& out, const std::string& dtype,
                const std::string& quant, int bits, int group, bool rotate, int clip) {
  const char* who = "echo_allreduce.reference.all_gather";
  const echo::dtype t = parse_dtype(dtype);
  const entry& e = find(quant, bits, group, rotate, clip, "none", "");
  if (!e.gather)
    throw std::invalid_argument(std::string(who) + ": not compiled for this quantizer (those echo/registry.cuh marks "
                                "tool::reference_sp)");
  if (in.empty()) throw std::invalid_argument(std::string(who) + ": no inputs (one array per rank)");
  const size_t m = in[0].size();
  std::vector<const void*> ip;
  std::vector<void*> op;
  rank_pointers(who, in, out, t, m, m * in.size(), ip, op);
  nb::gil_scoped_release release;
  e.gather(t, ip, op, m);
}

/// reference::residual_rms_norm on one rank's arrays: out (the all-reduce, becomes the normalised
/// rows), residual (updated in place), weight (hidden values).
void residual_rms_norm(const out_array& out, const out_array& residual, const in_array& weight, float epsilon,
                       const std::string& dtype) {
  const echo::dtype t = parse_dtype(dtype);
  check_array(out.dtype(), t, "out", 0);
  check_array(residual.dtype(), t, "residual", 0);
  check_array(weight.dtype(), t, "weight", 0);
  const size_t n = out.size();
  if (residual.size() != n)
    throw std::invalid_argument("echo_allreduce.reference.residual_rms_norm: residual has " + std::to_string(residual.size()) +
                                " elements, out " + std::to_string(n));
  nb::gil_scoped_release release;
  echo::dispatch_dtype(t, [&](auto tag) {
    using T = decltype(tag);
    const echo::epilogue::residual_rms_norm<T> e{static_cast<T*>(residual.data()), static_cast<const T*>(weight.data()),
                                                 weight.size(), epsilon};
    echo::reference::residual_rms_norm(e, static_cast<T*>(out.data()), n);
  });
}

}  // namespace
}  // namespace echo_py::ref

NB_MODULE(_reference, m) {
  using namespace echo_py::ref;
  m.doc() = "echo::reference::all_reduce on numpy arrays (use echo_allreduce.reference)";
  // The reference's own argument checks (capacity, ranks) throw echo::error: an argument problem here.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const echo::error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<chain_base>(m, "ChainState",
                         "Error-feedback state of one chain over `ranks` simulated ranks (echo::reference::chain_state).")
      .def(nb::new_(&make_chain), "ranks"_a, "capacity"_a, "storage"_a = "step8")
      .def_prop_ro("ranks", &chain_base::ranks)
      .def_prop_ro("capacity", &chain_base::capacity)
      .def_prop_ro("storage", &chain_base::storage)
      .def_prop_ro("size", &chain_base::size, "n of the chain's calls so far (0: fresh)")
      .def("reset", &chain_base::reset, "End the chain (a pass boundary): the next call starts from zero errors.")
      .def(
          "errors",
          [](const chain_base& c, int rank) {
            if (rank < 0 || rank >= c.ranks()) throw std::invalid_argument("echo_allreduce.reference.ChainState.errors: rank out of range");
            auto* v = new std::vector<float>(c.capacity());
            for (size_t i = 0; i < v->size(); ++i) (*v)[i] = c.error(rank, i);
            nb::capsule owner(v, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
            return nb::ndarray<nb::numpy, float, nb::ndim<1>>(v->data(), {v->size()}, owner);
          },
          "rank"_a, "The stored errors of `rank`, widened to float32 (capacity values).");

  m.def("all_reduce", &all_reduce, "inputs"_a, "out"_a, "dtype"_a, "quant"_a, "bits"_a, "group_size"_a, "rotate"_a,
        "clip"_a, "comp"_a, "storage"_a, "chain"_a = nb::none(), "closes"_a = false);
  m.def("reduce_scatter", &reduce_scatter, "inputs"_a, "out"_a, "dtype"_a, "quant"_a, "bits"_a, "group_size"_a, "rotate"_a,
        "clip"_a, "comp"_a, "storage"_a, "chain"_a = nb::none());
  m.def("all_gather", &all_gather, "inputs"_a, "out"_a, "dtype"_a, "quant"_a, "bits"_a, "group_size"_a, "rotate"_a, "clip"_a);
  m.def("residual_rms_norm", &residual_rms_norm, "out"_a, "residual"_a, "weight"_a, "epsilon"_a, "dtype"_a);
  m.def("instantiations", [] {
    std::vector<std::tuple<std::string, int, int, bool, int, std::string, std::string, bool, bool>> v;
    for (const entry& e : table())
      v.emplace_back(e.name.quant.name, e.name.quant.bits, e.name.quant.group, e.name.quant.rotate, e.name.quant.clip,
                     e.name.comp, e.name.storage, e.scatter != nullptr, e.gather != nullptr);
    return v;
  });
}
