// none: no quantization. The pipeline carries values in the caller's element type (16-bit for
// bf16 / fp16 inputs), so with no compensation the result is the exact fp32 sum rounded once.
#pragma once

#include "../config.cuh"

namespace echo::quant {

struct none {
  static constexpr const char* name = "none";
  static constexpr bool quantizes = false;
  static constexpr int bits = 16;  // for fp32 inputs the wire carries 32 bits
  static constexpr int group = 1;
  static constexpr bool holds_zero = true;  // no grid: values travel exact (group_contract's member)
};

}  // namespace echo::quant
