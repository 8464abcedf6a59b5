// Division by a run-time invariant divisor with a multiply-high and a shift (Granlund &
// Montgomery, "Division by invariant integers using multiplication", PLDI 1994, round-up
// variant for 31-bit dividends): the decode kernel maps every token to (block, offset) per
// tile, and a hardware-less integer division costs tens of instructions.
// Host and device code (a plain header, so CPU unit tests check it exhaustively).
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define PA_HOST_DEVICE __host__ __device__
#else
#define PA_HOST_DEVICE
#endif

namespace pagedattn::cuda {

/// n / d and n % d for 0 <= n < 2^31 and a fixed 1 <= d < 2^31.
struct FastDiv {
  std::uint32_t d = 1;
  std::uint32_t mul = 0;   // ceil(2^(31 + l) / d) with l = ceil(log2(d)); unused when d == 1
  std::uint32_t shift = 0;  // l - 1

  FastDiv() = default;
  explicit FastDiv(std::uint32_t divisor) : d(divisor) {
    if (d <= 1) return;
    std::uint32_t l = 0;
    while ((std::uint64_t{1} << l) < d) ++l;
    mul = static_cast<std::uint32_t>(((std::uint64_t{1} << (31 + l)) + d - 1) / d);
    shift = l - 1;
  }

  PA_HOST_DEVICE std::uint32_t div(std::uint32_t n) const {
    if (d == 1) return n;
#ifdef __CUDA_ARCH__
    return __umulhi(n, mul) >> shift;
#else
    return static_cast<std::uint32_t>((static_cast<std::uint64_t>(n) * mul) >> 32) >> shift;
#endif
  }
};

}  // namespace pagedattn::cuda
