// tile_stages<Cfg>: the per-sub-tile arithmetic of the Echo pipeline, shared by every transport's
// kernels (cuda_ipc's fused kernel, nccl's staged kernels, the deferred update), so that all of
// them are bit-identical to each other and to echo::reference.
//
// A lane owns V consecutive elements starting at `first`, of which `valid` (0..V) exist; every
// lane of the warp calls every stage (groups and state groups are reduced with shuffles). Stages
// compute and return what goes on the wire; the caller stores it where its transport needs it.
#pragma once

#include "../comp/compensator.cuh"
#include "../comp/state_storage.cuh"
#include "../detail/fp_ops.cuh"
#include "../epilogue/destination.cuh"
#include "group_transform.cuh"
#include "tile_config.cuh"

#include <type_traits>

namespace echo::collective {

#if ECHO_HAS_CUDA

/// A chain's storage as one call sees it: laid out for the call's n; `active` false when the call
/// starts a fresh chain (the stored errors then read as zero, whatever the memory holds).
struct state_ref {
  unsigned char* data = nullptr;
  size_t n = 0;
  bool active = false;
  /// Whether the call keeps the errors of its own segment (false: it closes its chain, and keeps
  /// none; its send errors it skips through push's store_error).
  bool keep_own = true;
};

namespace detail {

/// The state storage policy of a compensator; an empty stand-in without state.
struct no_state {
  template <int>
  using raw = int;
  static constexpr bool data_step = false;
};
template <class Comp, bool = Comp::keeps_state>
struct state_storage_of {
  using type = no_state;
};
template <class Comp>
struct state_storage_of<Comp, true> {
  using type = comp::state_storage<typename Comp::storage>;
};

}  // namespace detail

template <class Cfg>
struct tile_stages {
  using T = typename Cfg::element;
  using Comp = typename Cfg::comp;
  using codec = typename Cfg::codec;
  using packed = typename codec::packed;
  static constexpr int V = Cfg::V;
  static constexpr bool keeps = Comp::keeps_state;
  /// The quantizer's group transform (quant::rotated): the codes, the owner's sum and the chain's
  /// errors live in its domain; only the output goes back.
  using transform = group_transform<typename Cfg::quant, V>;
  static constexpr bool rotates = transform::active;

  using storage = typename detail::state_storage_of<Comp>::type;
  /// The storage takes the data group's step (comp::step_state) where the call quantizes on a grid
  /// that holds zero; otherwise (quant::none, naive_zero_point) it fits a step to its own errors.
  static constexpr bool uses_data_step =
      storage::data_step && Cfg::quant::quantizes && Cfg::quant::holds_zero;

  /// The loads of a lane's entry operands (x and its stored error), issued ahead of use.
  struct operands {
    echo::detail::raw_run<T, V> x;
    typename storage::template raw<V> c;
  };

  static constexpr int prefetch = Cfg::policy::prefetch;

  /// Ask L2 for the input (x, and the stored errors of an active chain) of elements [b, b + count).
  __device__ __forceinline__ static void prefetch_inputs(const T* in, const state_ref& st, size_t b, size_t count,
                                                         size_t in_begin = 0) {
    echo::detail::prefetch_l2(in + (b - in_begin), static_cast<uint32_t>(count * sizeof(T)) & ~15u);
    if constexpr (keeps) {
      if (st.active) storage::prefetch(st.data, st.n, b, count);
    }
  }

  /// The operands of the lane at message index `first`; in holds the message from index in_begin
  /// on (0, or the own segment's first index where in is the segment alone: the all-gather).
  __device__ __forceinline__ static operands fetch(const T* in, const state_ref& st, size_t first, int valid,
                                                   size_t in_begin = 0) {
    operands o;
    o.x = echo::detail::load_raw<T, V>(in + (first - in_begin), valid);
    if constexpr (keeps) o.c = storage::template load<V>(st.data, st.n, first, st.active ? valid : 0);
    return o;
  }

  /// Whether entry widens bf16 from 32-bit words (echo::detail::widen_pairs): for quantized
  /// calls under policies of 128 registers a thread or more (at most 512 threads a SM), not under
  /// the heavy one's 80, where ptxas then spilled 56 / 80 B instead of 28 / 52 and 8-bit ran 3.7 %
  /// slower at 1 GiB, while 4-bit under the lean one ran 2.3 % faster (one GPU,
  /// docs/tuning.md). The 16-bit pipeline (quant::none) keeps its code: not measured.
  static constexpr bool widen_words =
      Cfg::quant::quantizes && Cfg::policy::threads * Cfg::policy::blocks_per_sm <= 512;

  /// x' = x + c (c = 0 in a fresh chain); with a transform, x' = T(x) + c for a whole group.
  __device__ __forceinline__ static void entry(const operands& o, const state_ref& st, float (&x)[V], bool whole, int lane) {
    if constexpr (widen_words)
      echo::detail::widen_pairs(o.x, x);
    else
      echo::detail::widen(o.x, x);
    if constexpr (rotates) transform::forward(x, lane, whole);
    if constexpr (keeps) {
      if (st.active) storage::template add<V>(o.c, x);
    }
  }

  /// Whether rounding a finite group's decoded values to T keeps them finite: they lie within
  /// 2^8 steps of at most 65504 (plus naive_zero_point's fp16 offset), beyond half_t's range but
  /// not bfloat16_t's or float's.
  static constexpr bool rounds_finite = !std::is_same<T, half_t>::value;

  /// Whether the own segment's errors S - T(D(Q(S))) of a group quantized without clamping stay
  /// within 0.75 of its step, so a storage in units of the data step codes them without its clamp
  /// (push's errors, x' - D(Q(x')), are at most half a step for any grid). T's rounding adds at
  /// most |D| * 2^-8 for bf16 (none for float), and |D| <= max_code steps on a grid that holds
  /// zero: at most 63 / 256 = 0.25 steps up to 6 bits. half is left out: T(D) may overflow. With
  /// a transform the own error is S - D(Q(S)) itself (T's rounding is not kept), half a step.
  /// (uses_data_step first: only a data-step storage takes the hint, and only quantizers have bits
  /// of a grid.)
  static constexpr bool reduce_errors_in_range =
      uses_data_step && (rotates || std::is_same<T, float>::value || (std::is_same<T, bfloat16_t>::value && Cfg::quant::bits <= 6));
  /// Push takes the same hint, but not for half inputs, where it made ptxas spill the mid 4-bit
  /// kernel (0 -> 32 / 36 B) and the reduce takes none.
  static constexpr bool push_errors_in_range = uses_data_step && !std::is_same<T, half_t>::value;

  /// What is known of a lane's errors, so that keeping them skips work.
  struct error_bounds {
    /// Every e is finite, so Comp::keep (the identity on finite errors) is skipped: two
    /// operations a value.
    bool finite;
    /// Every |e| is at most 0.75 data steps (a lane the codec quantized without clamping, under
    /// the bounds above), so the data-step storage skips its own clamp.
    bool in_range;
  };

  /// Store what the chain keeps for the errors e that quantizing with r (group parameters p)
  /// made (every lane calls it). A storage in units of the data step (uses_data_step) gets the
  /// data group's step from them (the codec's own, not recomputed: a second 1 / s per lane cost
  /// the heavy policy registers it spilled, docs/benchmarks.md).
  __device__ __forceinline__ static void keep_errors(const state_ref& st, size_t first, int valid, float (&e)[V],
                                                     const packed& r, const quant::group_params& p, error_bounds known) {
    if (!known.finite) {
#pragma unroll
      for (int i = 0; i < V; ++i) e[i] = Comp::keep(e[i]);
    }
    if constexpr (uses_data_step)
      storage::template store<V>(st.data, st.n, first, valid, e, r.w, p, known.in_range);
    else
      storage::template store<V>(st.data, st.n, first, valid, e);
  }

  /// A (push, and the deferred update): quantize x' for its owner; with store_error (uniform over
  /// the warp) keep the send error e = x' - D(Q(x')).
  __device__ __forceinline__ static packed push(const operands& o, const state_ref& st, bool store_error, size_t first,
                                                int valid) {
    float x[V], dq[V];
    const int lane = threadIdx.x & 31;
    const bool whole = transform::whole(valid, lane);
    entry(o, st, x, whole, lane);
    quant::group_params p{};
    bool fits = false;
    packed r;
    if constexpr (!keeps && Cfg::quant::quantizes && !rotates) {
      r = codec::quantize(codec::range(o.x, x, valid), x, valid, dq, &p);  // x' = x: statistics as loaded
    } else {
      r = codec::quantize(x, valid, dq, &p, push_errors_in_range ? &fits : nullptr);
    }
    if constexpr (keeps) {
      if (store_error) {
#pragma unroll
        for (int i = 0; i < V; ++i) dq[i] = echo::detail::sub_rn(x[i], dq[i]);
        // A finite group's x' and D(Q(x')) are finite, and so is their difference (|D(Q(x'))| is
        // below 2^8 * 65504 * 2, far below half an ulp of FLT_MAX).
        keep_errors(st, first, valid, dq, r, p, error_bounds{p.finite, push_errors_in_range && fits});
      }
    }
    return r;
  }

  /// The reducing rank among its peers.
  struct rank_place {
    int me;
    int ranks;
  };

  /// S = the sum over ranks 0..P-1 in that order, in fp32, of the own x' (never quantized) and
  /// the receipts recv(i) (a packet pointer of sender i).
  template <class Recv>
  __device__ __forceinline__ static void owner_sum(const operands& own, const state_ref& st, bool whole, rank_place at,
                                                   Recv&& recv, float (&acc)[V]) {
    const int me = at.me, P = at.ranks, lane = threadIdx.x & 31;
    if (me == 0) {
      entry(own, st, acc, whole, lane);
    } else {
      codec::load(recv(0), lane, acc);
    }
    for (int i = 1; i < P; ++i) {
      float term[V];
      if (i == me) entry(own, st, term, whole, lane);
      else codec::load(recv(i), lane, term);
#pragma unroll
      for (int v = 0; v < V; ++v) acc[v] = echo::detail::add_rn(acc[v], term[v]);
    }
  }

  /// B of the reduce-scatter: S as in reduce, written (transformed back) to out_at, the lane's
  /// values of the rank's output, rounded once to T: each value went through one quantization,
  /// on its way to the owner. The own segment keeps no error: zeros where the chain keeps them
  /// (a storage in units of the data step has no step here; the host refuses it).
  template <class Recv>
  __device__ __forceinline__ static void reduce_scatter(const operands& own, const state_ref& st, T* out_at, size_t first,
                                                        int valid, rank_place at, Recv&& recv) {
    const int lane = threadIdx.x & 31;
    const bool whole = transform::whole(valid, lane);
    float acc[V];
    owner_sum(own, st, whole, at, recv, acc);
    if constexpr (rotates) {
      if (whole) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[v] = echo::detail::mul_rn(acc[v], transform::H::inv_size);
      }
      transform::inverse_scaled(acc, lane, whole);
    }
    echo::detail::store_floats<T, V>(out_at, valid, acc);
    if constexpr (keeps && !storage::data_step) {
      if (st.keep_own) {
        float zero[V];
#pragma unroll
        for (int v = 0; v < V; ++v) zero[v] = 0.0f;
        storage::template store<V>(st.data, st.n, first, valid, zero);
      }
    }
  }

  /// B (reduce the own segment): S = the sum over ranks 0..P-1 in that order, in fp32, of the own
  /// x' (never quantized) and the receipts recv(i) (a packet pointer of sender i); quantize S
  /// once; write the own output (to `to`) and keep e = S - out. Returns the packet of S for every
  /// peer.
  template <class Recv>
  __device__ __forceinline__ static packed reduce(const operands& own, const state_ref& st, const epilogue::destination<T>& to, size_t first,
                                                  int valid, rank_place at, Recv&& recv) {
    const int lane = threadIdx.x & 31;
    const bool whole = transform::whole(valid, lane);
    float acc[V];
    owner_sum(own, st, whole, at, recv, acc);
    float dq[V];
    quant::group_params p{};
    bool fits = false;
    const packed r = codec::quantize(acc, valid, dq, &p, keeps && reduce_errors_in_range ? &fits : nullptr);
    if constexpr (rotates) {
      float y[V];
#pragma unroll
      for (int v = 0; v < V; ++v) y[v] = dq[v];
      if (whole) {
#pragma unroll
        for (int v = 0; v < V; ++v) y[v] = echo::detail::mul_rn(y[v], transform::H::inv_size);
      }
      transform::inverse_scaled(y, lane, whole);
      to.store(first, valid, y);
      if constexpr (keeps) {
        if (st.keep_own) {
#pragma unroll
          for (int v = 0; v < V; ++v) dq[v] = echo::detail::sub_rn(acc[v], dq[v]);
          keep_errors(st, first, valid, dq, r, p, error_bounds{p.finite, reduce_errors_in_range && fits});
        }
      }
    } else {
      to.store(first, valid, dq);
      if constexpr (keeps) {
        if (st.keep_own) {
#pragma unroll
          for (int v = 0; v < V; ++v)
            dq[v] = echo::detail::sub_rn(acc[v], element_traits<T>::to_float(element_traits<T>::from_float(dq[v])));
          keep_errors(st, first, valid, dq, r, p, error_bounds{rounds_finite && p.finite, reduce_errors_in_range && fits});
        }
      }
    }
    return r;
  }

  /// C (gather): dequantize an owner's packet into the output (transformed back, for a whole group).
  __device__ __forceinline__ static void gather(const unsigned char* packet, const epilogue::destination<T>& to, size_t first,
                                                int valid, int lane) {
    float v[V];
    if constexpr (rotates) {
      const bool whole = transform::whole(valid, lane);
      codec::load(packet, lane, v, whole ? transform::H::inv_size : 1.0f);
      transform::inverse_scaled(v, lane, whole);
    } else {
      codec::load(packet, lane, v);
    }
    if (valid > 0) to.store(first, valid, v);
  }
};

namespace detail {

__device__ __forceinline__ int valid_count(size_t first, size_t end, int V) {
  return first >= end ? 0 : (end - first < static_cast<size_t>(V) ? static_cast<int>(end - first) : V);
}

/// f(operands, first, valid, u) for the `subs` sub-tiles of a tile whose lane-0 element is
/// `first`. (Issuing sub-tile u + 1's loads before computing sub-tile u was measured to change
/// nothing on H200 while it doubled the operand registers; docs/benchmarks.md.) With
/// Cfg::policy::prefetch = D > 0, lane 0 asks L2 for the input of sub-tile u + D (u = 0: of
/// sub-tiles 1..D) before sub-tile u's loads, so they find it there; a hint, results unchanged.
template <class Stages, class T, class F>
__device__ __forceinline__ void over_subtiles(const T* in, const state_ref& st, size_t first, size_t end, int subs,
                                              size_t sub_elems, F&& f, size_t in_begin = 0) {
  constexpr int D = Stages::prefetch;
  for (int u = 0; u < subs; ++u, first += sub_elems) {
    if constexpr (D > 0) {
      if ((threadIdx.x & 31) == 0 && u + 1 < subs) {
        const int ahead = u == 0 ? 1 : D;  // first sub-tile to ask for
        const int count = u == 0 ? min(D, subs - 1) : (u + D < subs ? 1 : 0);
        const size_t b = first + ahead * sub_elems;
        if (count > 0 && b < end) Stages::prefetch_inputs(in, st, b, min(end - b, count * sub_elems), in_begin);
      }
    }
    const int valid = valid_count(first, end, Stages::V);
    f(Stages::fetch(in, st, first, valid, in_begin), first, valid, u);
  }
}

}  // namespace detail

#endif

}  // namespace echo::collective
