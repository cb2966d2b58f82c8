// The quantizers the Python package instantiates, by family: the host reference's table and the
// torch ops' table are both built from these lists, so the two always offer the same entries.
// docs/python.md lists them; adding one here adds it to both tables.
#pragma once

#include "compensators.hpp"

namespace echo_py {

using zero_aware_4 = type_list<echo::quant::zero_aware<4, 32>, echo::quant::zero_aware<4, 64>, echo::quant::zero_aware<4, 128>>;
using zero_aware_8 = type_list<echo::quant::zero_aware<8, 32>, echo::quant::zero_aware<8, 64>, echo::quant::zero_aware<8, 128>>;
using symmetric_family = type_list<echo::quant::symmetric<4, 128>>;
using naive_zero_point_family = type_list<echo::quant::naive_zero_point<4, 128>>;
using none_family = type_list<echo::quant::none>;

/// The outlier-robust 4-bit path: rotated groups (quant::rotated), clipped ranges (quant::clipped,
/// the ratio in 1024ths), both, and the rotated 8-bit code the closing call sends.
template <class Q>
using rot = echo::quant::rotated<Q>;
template <class Q, int R>
using clip = echo::quant::clipped<Q, R>;
template <int B, int G>
using za = echo::quant::zero_aware<B, G>;
using outlier_family = type_list<rot<za<4, 32>>, rot<za<4, 64>>, rot<za<4, 128>>, rot<za<8, 128>>, clip<za<4, 128>, 952>,
                                 rot<clip<za<4, 64>, 952>>, rot<clip<za<4, 128>, 973>>, rot<clip<za<4, 128>, 952>>,
                                 rot<clip<za<4, 128>, 922>>, rot<clip<za<4, 128>, 870>>, rot<clip<za<4, 128>, 819>>,
                                 rot<clip<za<4, 128>, 768>>, rot<clip<za<4, 128>, 717>>, rot<clip<za<4, 64>, 870>>,
                                 rot<clip<za<4, 64>, 819>>>;
/// The torch ops' share of it (each entry a full set of device pipelines).
using outlier_torch = type_list<rot<za<4, 32>>, rot<za<4, 64>>, rot<za<4, 128>>, rot<za<8, 128>>, clip<za<4, 128>, 870>,
                                rot<clip<za<4, 64>, 870>>, rot<clip<za<4, 128>, 870>>>;

/// The transport::nccl entries of the torch table: the default quantizers only (each entry is a
/// full set of pipeline kernels; the rest would double the build for paths nobody asked for).
using nccl_quantizers = type_list<echo::quant::zero_aware<4, 128>, echo::quant::zero_aware<8, 128>, echo::quant::none>;

}  // namespace echo_py
