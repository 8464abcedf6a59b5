// FastDiv (src/cuda/common/fast_div.h) must equal integer division for every dividend the decode
// kernel can form (token positions < 2^31) and every block size.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "src/cuda/common/fast_div.h"

namespace pagedattn::cuda {
namespace {

std::vector<std::uint32_t> dividends() {
  std::vector<std::uint32_t> n;
  for (std::uint32_t i = 0; i < 5000; ++i) n.push_back(i);
  const std::uint32_t top = (std::uint32_t{1} << 31) - 1;
  for (std::uint32_t i = 0; i < 5000; ++i) n.push_back(top - i);
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any(0, top);
  for (int i = 0; i < 20000; ++i) n.push_back(any(rng));
  return n;
}

TEST(FastDiv, MatchesDivisionForEveryBlockSizeUpTo4096) {
  const auto ns = dividends();
  for (std::uint32_t d = 1; d <= 4096; ++d) {
    const FastDiv f(d);
    for (std::uint32_t n : ns) {
      ASSERT_EQ(f.div(n), n / d) << "n=" << n << " d=" << d;
      // multiples of d and their neighbours are where a rounding error would show
    }
    for (std::uint32_t k : {1u, 2u, 1000u, 524287u}) {
      const std::uint64_t m = std::uint64_t{k} * d;
      if (m + 1 >= (std::uint64_t{1} << 31)) continue;
      ASSERT_EQ(f.div(static_cast<std::uint32_t>(m)), k) << d;
      ASSERT_EQ(f.div(static_cast<std::uint32_t>(m - 1)), k - 1) << d;
      ASSERT_EQ(f.div(static_cast<std::uint32_t>(m + 1)), (m + 1) / d) << d;
    }
  }
}

TEST(FastDiv, LargeDivisors) {
  const auto ns = dividends();
  for (std::uint32_t d : {65535u, 65536u, 65537u, 1000003u, (1u << 30) + 1u, (1u << 31) - 1u}) {
    const FastDiv f(d);
    for (std::uint32_t n : ns) ASSERT_EQ(f.div(n), n / d) << "n=" << n << " d=" << d;
  }
}

}  // namespace
}  // namespace pagedattn::cuda
