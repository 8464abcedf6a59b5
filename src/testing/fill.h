// Deterministic pseudo-random numbers and NaN poison, shared by the test harness
// (src/testing/harness.cpp) and the serving replay (src/serving/): one generator and one poison
// pattern, so that a seed names the same inputs everywhere and every check sees the same NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "pagedattn/tensor.h"

namespace pagedattn::testing {

/// The 64-bit golden-ratio increment of SplitMix64 (Steele, Lea, Flood, "Fast splittable
/// pseudorandom number generators", OOPSLA 2014).
inline constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// SplitMix64's finaliser: a bijective 64-bit mix (same paper; the constants of Stafford's
/// "Mix13" variant).
inline std::uint64_t mix64(std::uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// SplitMix64: a tiny generator whose sequence is the same on every platform and standard
/// library (std::uniform_real_distribution is not). Constructed from its raw 64-bit state;
/// each caller derives the state from its seed in its own way (the derivations are part of
/// what a seed means, so they stay as they were).
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t state) : state_(state) {}
  std::uint64_t next() { return mix64(state_ += kGolden); }
  /// Uniform in [lo, hi) from the top 53 bits.
  float uniform(float lo, float hi) {
    const double u = static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0);
    return static_cast<float>(lo + (hi - lo) * u);
  }
  /// Uniform integer in [0, n) (modulo bias below 2^-40 for the sizes used here); 0 for n = 0
  /// without drawing.
  std::uint64_t below(std::uint64_t n) { return n ? next() % n : 0; }

 private:
  std::uint64_t state_;
};

/// One element of a NaN bit pattern per dtype (DESIGN.md §2: memory the math does not use is
/// filled with NaN), dtype_size(dtype) bytes. The payloads are unusual on purpose, so a check
/// can also tell "untouched" from "overwritten by some other NaN"; integer dtypes get 0xA5
/// bytes.
std::vector<std::uint8_t> poison_element(DType dtype);

/// `elements` copies of poison_element(dtype).
std::vector<std::uint8_t> poisoned_bytes(DType dtype, std::int64_t elements);

/// Fill `bytes` bytes at `dst` with copies of `element` (a trailing partial element is left
/// as it was).
void fill_pattern(unsigned char* dst, std::size_t bytes, const std::vector<std::uint8_t>& element);

}  // namespace pagedattn::testing
