// Storage-format conversions shared by every backend (host and device), so that GPU writers
// are bitwise equal to the CPU writer (DESIGN.md §2.8). All conversions from float round to
// nearest, ties to even. fp8 saturates to the format's largest finite value (NaN stays NaN);
// fp16 and bf16 follow IEEE (overflow to infinity), as the CUDA intrinsics __float2half_rn and
// __float2bfloat16_rn do.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagedattn/tensor.h"

#if defined(__CUDACC__)
#define PA_HD __host__ __device__ __forceinline__
#else
#define PA_HD inline
#endif

namespace pagedattn::numeric {

PA_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

PA_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

PA_HD float round_to_integer_even(float v) {
#if defined(__CUDA_ARCH__)
  return rintf(v);
#else
  return std::nearbyint(v);  // default rounding mode: to nearest, ties to even
#endif
}

/// Encode |x| (x finite or inf, not NaN) into a small float format with kExp exponent bits,
/// kMan mantissa bits and bias kBias, without the sign. Returns the magnitude code (may exceed
/// the largest finite code; callers clamp or map to infinity).
template <int kExp, int kMan, int kBias>
PA_HD std::uint32_t encode_magnitude(float ax) {
  const std::uint32_t bits = float_bits(ax);
  const int exp32 = static_cast<int>(bits >> 23) - 127;
  constexpr int kMinNormalExp = 1 - kBias;
  if (exp32 < kMinNormalExp) {
    // Subnormal (or zero) in the target: count quanta of 2^(kMinNormalExp - kMan). The scaling
    // by a power of two is exact, so one rounding happens. A result of 2^kMan is the smallest
    // normal number, whose code is exactly 2^kMan too.
    const float quanta = ax * bits_float(static_cast<std::uint32_t>(127 - (kMinNormalExp - kMan)) << 23);
    return static_cast<std::uint32_t>(round_to_integer_even(quanta));
  }
  if (exp32 > 127) return 0xFFFFFFFFu;  // inf
  constexpr int kDrop = 23 - kMan;
  const std::uint32_t rounded = (bits + ((1u << (kDrop - 1)) - 1u) + ((bits >> kDrop) & 1u)) >> kDrop;
  // Rebias: float exponent 127 <-> target exponent kBias. The carry of the rounding moves into
  // the exponent field, as it should.
  return rounded - (static_cast<std::uint32_t>(127 - kBias) << kMan);
}

// ---- fp8 e4m3 (OCP "e4m3fn"): bias 7, no infinities, max 448 = 0x7E, NaN = 0x7F ----
PA_HD std::uint8_t float_to_e4m3(float x) {
  const std::uint32_t sign = (float_bits(x) >> 24) & 0x80u;
  if (x != x) return static_cast<std::uint8_t>(sign | 0x7Fu);
  std::uint32_t code = encode_magnitude<4, 3, 7>(std::fabs(x));
  if (code > 0x7Eu) code = 0x7Eu;
  return static_cast<std::uint8_t>(sign | code);
}

PA_HD float e4m3_to_float(std::uint8_t v) {
  const std::uint32_t sign = (v & 0x80u) << 24;
  const std::uint32_t exp = (v >> 3) & 0xFu;
  const std::uint32_t man = v & 0x7u;
  if (exp == 0xFu && man == 0x7u) return bits_float(sign | 0x7FC00000u);
  if (exp == 0) {
    // man * 2^-9
    const float mag = static_cast<float>(man) * 0.001953125f;
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 127 - 7) << 23) | (man << 20));
}

// ---- fp8 e5m2: bias 15, max 57344 = 0x7B, inf = 0x7C, NaN = 0x7D..0x7F ----
PA_HD std::uint8_t float_to_e5m2(float x) {
  const std::uint32_t sign = (float_bits(x) >> 24) & 0x80u;
  if (x != x) return static_cast<std::uint8_t>(sign | 0x7Fu);
  std::uint32_t code = encode_magnitude<5, 2, 15>(std::fabs(x));
  if (code > 0x7Bu) code = 0x7Bu;  // saturate (also +-inf inputs)
  return static_cast<std::uint8_t>(sign | code);
}

PA_HD float e5m2_to_float(std::uint8_t v) {
  const std::uint32_t sign = (v & 0x80u) << 24;
  const std::uint32_t exp = (v >> 2) & 0x1Fu;
  const std::uint32_t man = v & 0x3u;
  if (exp == 0x1Fu) return bits_float(sign | (man ? 0x7FC00000u : 0x7F800000u));
  if (exp == 0) {
    // man * 2^-16
    const float mag = static_cast<float>(man) * 1.52587890625e-05f;
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (man << 21));
}

// ---- fp16 (IEEE binary16) ----
PA_HD std::uint16_t float_to_half_bits(float x) {
  const std::uint32_t sign = (float_bits(x) >> 16) & 0x8000u;
  if (x != x) return static_cast<std::uint16_t>(sign | 0x7E00u);
  std::uint32_t code = encode_magnitude<5, 10, 15>(std::fabs(x));
  if (code >= 0x7C00u) code = 0x7C00u;  // overflow -> inf
  return static_cast<std::uint16_t>(sign | code);
}

PA_HD float half_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t man = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_float(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    const float mag = static_cast<float>(man) * 5.9604644775390625e-08f;  // 2^-24
    return sign ? -mag : mag;
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

// ---- bf16 ----
PA_HD std::uint16_t float_to_bf16_bits(float x) {
  std::uint32_t u = float_bits(x);
  if (x != x) return static_cast<std::uint16_t>((u >> 16) | 0x40u);  // keep sign, quiet NaN
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

PA_HD float bf16_bits_to_float(std::uint16_t b) {
  return bits_float(static_cast<std::uint32_t>(b) << 16);
}

/// Load element `i` of a buffer of float dtype `dtype` as float (host helper; fp8 values are
/// returned unscaled).
inline float load_as_float(const void* base, DType dtype, std::int64_t i) {
  switch (dtype) {
    case DType::kFloat32: return static_cast<const float*>(base)[i];
    case DType::kFloat16: return half_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kBFloat16: return bf16_bits_to_float(static_cast<const std::uint16_t*>(base)[i]);
    case DType::kFloat8E4M3: return e4m3_to_float(static_cast<const std::uint8_t*>(base)[i]);
    case DType::kFloat8E5M2: return e5m2_to_float(static_cast<const std::uint8_t*>(base)[i]);
    default: return NAN;
  }
}

/// Store `v` rounded to `dtype` (RNE; fp8 saturating) into element `i` (host helper).
inline void store_from_float(void* base, DType dtype, std::int64_t i, float v) {
  switch (dtype) {
    case DType::kFloat32: static_cast<float*>(base)[i] = v; break;
    case DType::kFloat16: static_cast<std::uint16_t*>(base)[i] = float_to_half_bits(v); break;
    case DType::kBFloat16: static_cast<std::uint16_t*>(base)[i] = float_to_bf16_bits(v); break;
    case DType::kFloat8E4M3: static_cast<std::uint8_t*>(base)[i] = float_to_e4m3(v); break;
    case DType::kFloat8E5M2: static_cast<std::uint8_t*>(base)[i] = float_to_e5m2(v); break;
    default: break;
  }
}

/// `v` rounded to `dtype` and back: what storing and reloading gives.
inline float round_to(DType dtype, float v) {
  unsigned char buf[4];
  store_from_float(buf, dtype, 0, v);
  return load_as_float(buf, dtype, 0);
}

}  // namespace pagedattn::numeric
