// Conversions between fp32 and the storage formats pagedattn reads and writes (fp16, bf16, fp8
// e4m3 and e5m2): the library's own conversions, so that a caller preparing inputs, reading
// outputs or filling a cache by hand gets exactly the bits that write_kv stores and the values
// the kernels read (DESIGN.md §2.6, §2.8).
//
// Rounding: from fp32, round to nearest, ties to even, always (IEEE 754 roundTiesToEven).
// Out of range:
//  - fp16 and bf16 follow IEEE 754: a magnitude that rounds above the largest finite value
//    (65504; bf16 3.3895e38) becomes infinity, as CUDA's __float2half_rn / __float2bfloat16_rn
//    give;
//  - fp8 saturates: a magnitude that rounds above the largest finite value (e4m3 448, e5m2
//    57344), infinity included, becomes that value with its sign (OCP 8-bit floating point
//    specification, "saturating" conversion; e4m3 has no infinity);
//  - NaN stays NaN with its sign (fp16 0x7E00, bf16 the input's upper half with the quiet bit,
//    fp8 0x7F; each | the sign bit).
// Subnormals of every target format are produced and read (no flush to zero).
// To fp32 every conversion is exact.
#pragma once

#include <cstdint>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// fp32 -> IEEE binary16 bits (1 sign, 5 exponent, 10 mantissa bits).
std::uint16_t float_to_fp16(float x);
/// IEEE binary16 bits -> fp32 (exact).
float fp16_to_float(std::uint16_t bits);

/// fp32 -> bfloat16 bits (the upper 16 bits of an fp32, rounded: 1 sign, 8 exponent, 7 mantissa).
std::uint16_t float_to_bf16(float x);
/// bfloat16 bits -> fp32 (exact).
float bf16_to_float(std::uint16_t bits);

/// fp32 -> OCP fp8 e4m3 ("e4m3fn": bias 7, no infinities, largest 448 = 0x7E, NaN 0x7F),
/// saturating.
std::uint8_t float_to_fp8_e4m3(float x);
/// fp8 e4m3 bits -> fp32 (exact; 0x7F / 0xFF are NaN).
float fp8_e4m3_to_float(std::uint8_t bits);

/// fp32 -> OCP fp8 e5m2 (bias 15, largest 57344 = 0x7B, infinity 0x7C, NaN 0x7D..0x7F),
/// saturating: infinity in gives 0x7B (largest finite) out, as write_kv stores it.
std::uint8_t float_to_fp8_e5m2(float x);
/// fp8 e5m2 bits -> fp32 (exact; 0x7C is infinity, 0x7D..0x7F NaN, each with its sign).
float fp8_e5m2_to_float(std::uint8_t bits);

/// Convert `count` fp32 values into a buffer of `dtype` (fp32, fp16, bf16, fp8_e4m3 or
/// fp8_e5m2; elements of dtype_size(dtype) bytes, densely packed, host memory).
/// `scale`: for an fp8 dtype the stored value is fp8(src[i] / scale), write_kv's rule for a
/// cache with k_scale / v_scale = scale (the division in fp32, then one rounding, so the bytes
/// equal write_kv's for fp32 input); for the other dtypes it must be 1.
/// Errors (nothing written): kInvalidArgument for count < 0, a null src or dst with
/// count > 0, an integer dtype, a scale that is not finite and > 0, or a scale other than 1
/// for a dtype that is not fp8.
Status convert_from_float(const float* src, std::int64_t count, DType dtype, void* dst,
                          float scale = 1.0f);

/// Convert `count` elements of `dtype` (host memory, densely packed) to fp32. For an fp8
/// dtype the result is float(stored) * scale, the value the attention kernels read (DESIGN.md
/// §2.6); for the other dtypes `scale` must be 1. Errors (nothing written): as
/// convert_from_float.
Status convert_to_float(const void* src, std::int64_t count, DType dtype, float* dst,
                        float scale = 1.0f);

}  // namespace pagedattn
