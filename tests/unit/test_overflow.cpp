// Sizes whose products overflow 64-bit addressing are input errors, never wrapped values that
// a writer or reader would then use (found by trying absurd --page-pad values and hand-made
// strides).
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace {

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

TEST(Overflow, PagePadThatOverflowsIsRejectedByName) {
  KVCacheSpec spec{KVLayout::kNHD, 8, 16, 2, 64, DType::kBFloat16, kMax};
  auto e = kv_cache_elements(spec);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(e.status().message().find("page_pad"), std::string::npos) << e.status().message();
  auto c = make_kv_cache(spec, nullptr, nullptr);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("page_pad"), std::string::npos) << c.status().message();
}

TEST(Overflow, BlockCountTimesBlockSizeThatOverflowsIsRejected) {
  KVCacheSpec spec{KVLayout::kHND, kMax / 4, 16, 8, 128, DType::kFloat16, 0};
  auto e = kv_cache_elements(spec);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("num_blocks"), std::string::npos) << e.status().message();
  // Three int32 factors whose product alone exceeds int64.
  KVCacheSpec wide{KVLayout::kNHD, 1, 1 << 30, 1 << 30, 256, DType::kFloat16, 0};
  EXPECT_FALSE(kv_cache_elements(wide).ok());
}

TEST(Overflow, HandMadeStridesWhoseSpanOverflowsAreRejectedAndNothingIsWritten) {
  // Real memory for the first block; the block stride claims an absurd distance to the next.
  std::vector<std::uint16_t> k(2 * 16 * 2 * 64, 0x7FC0), v(k.size(), 0x7FC0);
  for (std::int64_t stride0 : {kMax - 10, std::int64_t{1} << 62}) {
    KVCache cache;
    cache.layout = KVLayout::kNHD;
    cache.key = TensorView::strided(k.data(), DType::kBFloat16, {2, 16, 2, 64},
                                    {stride0, 128, 64, 1});
    cache.value = TensorView::strided(v.data(), DType::kBFloat16, {2, 16, 2, 64},
                                      {stride0, 128, 64, 1});
    auto g = describe_kv_cache(cache);
    ASSERT_FALSE(g.ok()) << stride0;
    EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(g.status().message().find("overflows"), std::string::npos) << g.status().message();

    std::vector<std::uint16_t> key(2 * 64, 0x3F80), value(key.size(), 0x3F80);
    std::vector<std::int32_t> slots{16};
    const std::vector<std::uint16_t> k_before = k, v_before = v;
    Status st = write_kv(TensorView::contiguous(key.data(), DType::kBFloat16, {1, 2, 64}),
                         TensorView::contiguous(value.data(), DType::kBFloat16, {1, 2, 64}),
                         TensorView::contiguous(slots.data(), DType::kInt32, {1}), cache);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_EQ(k, k_before);
    EXPECT_EQ(v, v_before);
  }
}

TEST(DLPackInputs, ScalarsAndNegativeSizesAreRejected) {
  float value = 1.0f;
  std::int64_t shape[2] = {-3, 8};
  DLTensor dl{};
  dl.data = &value;
  dl.device = {kDLCPU, 0};
  dl.dtype = {kDLFloat, 32, 1};
  // A 0-dim tensor would otherwise become an "absent" view and switch a feature off silently.
  dl.ndim = 0;
  dl.shape = shape;
  auto scalar = from_dlpack(dl);
  ASSERT_FALSE(scalar.ok());
  EXPECT_NE(scalar.status().message().find("ndim"), std::string::npos);
  dl.ndim = 2;
  auto negative = from_dlpack(dl);
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("shape[0]"), std::string::npos)
      << negative.status().message();
}

TEST(DLPackInputs, ShapesWhoseElementCountOverflowsAreRejected) {
  float value = 1.0f;
  DLTensor dl{};
  dl.data = &value;
  dl.device = {kDLCPU, 0};
  dl.dtype = {kDLFloat, 32, 1};
  dl.ndim = 3;
  // 2^65 elements: the dense strides computed for null strides wrapped (strides[0] became 0,
  // an overlapping view) and numel() wrapped to 0 (the view looked empty).
  std::int64_t shape[3] = {2, std::int64_t{1} << 32, std::int64_t{1} << 32};
  dl.shape = shape;
  dl.strides = nullptr;
  auto dense = from_dlpack(dl);
  ASSERT_FALSE(dense.ok()) << "strides " << dense->strides[0] << " " << dense->strides[1];
  EXPECT_EQ(dense.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dense.status().message().find("overflows"), std::string::npos)
      << dense.status().message();
  // The same with explicit (broadcast) strides: the element count still overflows.
  std::int64_t strides[3] = {0, 0, 1};
  dl.strides = strides;
  auto broadcast = from_dlpack(dl);
  ASSERT_FALSE(broadcast.ok());
  EXPECT_EQ(broadcast.status().code(), StatusCode::kInvalidArgument);
  // Explicit strides whose largest offset overflows.
  std::int64_t shape2[2] = {4, 2};
  std::int64_t strides2[2] = {kMax / 2, 1};
  dl.ndim = 2;
  dl.shape = shape2;
  dl.strides = strides2;
  auto far = from_dlpack(dl);
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.status().code(), StatusCode::kInvalidArgument);
  // An empty tensor has no elements whatever its other sizes: accepted, with null strides too.
  std::int64_t empty[3] = {0, std::int64_t{1} << 40, std::int64_t{1} << 40};
  dl.ndim = 3;
  dl.shape = empty;
  dl.strides = nullptr;
  auto e = from_dlpack(dl);
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->numel(), 0);
  EXPECT_EQ(e->strides[2], 1);
  EXPECT_EQ(e->strides[1], std::int64_t{1} << 40);
}

}  // namespace
}  // namespace pagedattn
