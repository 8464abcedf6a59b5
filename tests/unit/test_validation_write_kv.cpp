// Negative tests, one per validation rule (DESIGN.md §3 "Errors", §4 "Negative tests"): each
// asserts the exact StatusCode, a message fragment naming the argument, and that the call
// changed nothing (cache, out and lse bytes are compared before and after). Each fixture first
// proves that its unmodified arguments are accepted, so every rejection below is caused by the
// one thing the test breaks.
//
// This file: write_kv's arguments, merge_attention_states' rules and the cache descriptions
// (kv_cache_elements, the parsers).
#include "tests/unit/validation_fixtures.h"

namespace pagedattn {
namespace {

using namespace validation_test;  // NOLINT: the fixtures, helpers and constants

TEST_F(WriteKvValidation, FixtureWritesExactlyTheMappedSlots) {
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  // Slot 5 = block 1, offset 1; slot 17 = block 4, offset 1. Nothing else changes (the skipped
  // row's slot -1 must not wrap to the last slot).
  std::size_t changed = 0;
  for (std::size_t i = 0; i < key_cache.size(); ++i) changed += key_cache[i] != 0x7E00;
  EXPECT_EQ(changed, static_cast<std::size_t>(2 * KVH * D));
  for (int t = 0; t < 2; ++t) {
    const std::int64_t slot = slots[static_cast<std::size_t>(t)];
    for (int e = 0; e < KVH * D; ++e) {
      EXPECT_EQ(key_cache[static_cast<std::size_t>(slot * KVH * D + e)],
                key[static_cast<std::size_t>(t * KVH * D + e)]);
      EXPECT_EQ(value_cache[static_cast<std::size_t>(slot * KVH * D + e)],
                value[static_cast<std::size_t>(t * KVH * D + e)]);
    }
  }
  EXPECT_EQ(key_cache.back(), 0x7E00) << "slot -1 wrapped to the last slot";
}
TEST_F(WriteKvValidation, SlotPastTheCache) {
  slots[1] = NB * BS;
  Expect(StatusCode::kInvalidArgument, "slot_mapping[1]");
}
TEST_F(WriteKvValidation, DuplicateSlots) {
  slots[1] = 5;
  Expect(StatusCode::kInvalidArgument, "one slot");
}
TEST_F(WriteKvValidation, SlotMappingFloatDtype) {
  sm.dtype = DType::kFloat32;
  Expect(StatusCode::kInvalidArgument, "slot_mapping.dtype");
}
TEST_F(WriteKvValidation, SlotMappingWrongNdim) {
  sm = TensorView::contiguous(slots.data(), DType::kInt64, {N, 1});
  Expect(StatusCode::kInvalidArgument, "slot_mapping.ndim");
}
TEST_F(WriteKvValidation, KeyHasFewerRowsThanSlots) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N - 1, KVH, D});
  Expect(StatusCode::kInvalidArgument, "key.shape[0]");
}
TEST_F(WriteKvValidation, ValueHasFewerRowsThanSlots) {
  v = TensorView::contiguous(value.data(), DType::kFloat16, {N - 1, KVH, D});
  Expect(StatusCode::kInvalidArgument, "value.shape[0]");
}
TEST_F(WriteKvValidation, KeyDtypeDiffersFromNonFp8Cache) {
  std::vector<float> kf(N * KVH * D, 0.5f);
  k = TensorView::contiguous(kf.data(), DType::kFloat32, {N, KVH, D});
  Expect(StatusCode::kInvalidArgument, "key.dtype");
}
TEST_F(WriteKvValidation, KeyAndValueDtypesDifferForFp8Cache) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x7F), v8(NB * BS * KVH * D, 0x7F);
  cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  std::vector<float> vf(N * KVH * D, 0.5f);
  v = TensorView::contiguous(vf.data(), DType::kFloat32, {N, KVH, D});
  const std::vector<std::uint8_t> k8_before = k8;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "value.dtype");
  EXPECT_TRUE(k8 == k8_before);
}
TEST_F(WriteKvValidation, KeyWrongKvHeads) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, 1, D});
  Expect(StatusCode::kInvalidArgument, "key.shape[1]");
}
TEST_F(WriteKvValidation, KeyWrongHeadSize) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, KVH, D / 2});
  Expect(StatusCode::kInvalidArgument, "key.shape[2]");
}
TEST_F(WriteKvValidation, KeyLastDimNotContiguous) {
  k = TensorView::strided(key.data(), DType::kFloat16, {1, KVH, D}, {KVH * D, D, 2});
  Expect(StatusCode::kInvalidArgument, "key.strides[2]");
}
TEST_F(WriteKvValidation, KeyWrongNdim) {
  k = TensorView::contiguous(key.data(), DType::kFloat16, {N, KVH * D});
  Expect(StatusCode::kInvalidArgument, "key.ndim");
}
TEST_F(WriteKvValidation, KeyNullData) {
  k.data = nullptr;
  Expect(StatusCode::kInvalidArgument, "key.data");
}
TEST_F(WriteKvValidation, SlotMappingOnAnotherDevice) {
  sm.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "slot_mapping.device");
}
TEST_F(WriteKvValidation, KeyOnAnotherDevice) {
  k.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "key.device");
}
TEST_F(WriteKvValidation, Fp8CacheScaleNotPositive) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x7F), v8(NB * BS * KVH * D, 0x7F);
  cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E5M2, {NB, BS, KVH, D});
  cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E5M2, {NB, BS, KVH, D});
  const std::vector<std::uint8_t> k8_before = k8, v8_before = v8;
  cache.k_scale = 0.0f;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "k_scale");
  cache.k_scale = 1.0f;
  cache.v_scale = -2.0f;
  EXPECT_REJECTED(write_kv(k, v, sm, cache), StatusCode::kInvalidArgument, "v_scale");
  EXPECT_TRUE(k8 == k8_before);
  EXPECT_TRUE(v8 == v8_before);
}
TEST_F(WriteKvValidation, OverlappingCacheBlocks) {
  cache.value.strides[0] = 1;
  Expect(StatusCode::kInvalidArgument, "overlap");
}
TEST_F(WriteKvValidation, KeyAndValueCachesSharingElementsAreRejected) {
  // The value cache one token into the key cache: writing values would overwrite keys.
  cache.value = TensorView::contiguous(key_cache.data() + KVH * D, DType::kFloat16,
                                       {NB - 1, BS, KVH, D});
  cache.key.shape[0] = NB - 1;
  Expect(StatusCode::kInvalidArgument, "shares memory with key_cache");
  // The same view for both.
  cache.value = cache.key;
  Expect(StatusCode::kInvalidArgument, "shares memory with key_cache");
}
TEST_F(WriteKvValidation, KeyAndValuePagesInterleavedInOneBufferAreAccepted) {
  // [blocks, 2, block, heads, head] (K and V halves of each page, as FlashInfer lays them out):
  // the spans meet but no element is shared.
  std::vector<std::uint16_t> pages(2 * NB * BS * KVH * D, 0x7E00);
  cache.key = TensorView::strided(pages.data(), DType::kFloat16, {NB, BS, KVH, D},
                                  {2 * BS * KVH * D, KVH * D, D, 1});
  cache.value = TensorView::strided(pages.data() + BS * KVH * D, DType::kFloat16,
                                    {NB, BS, KVH, D}, {2 * BS * KVH * D, KVH * D, D, 1});
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  // Slot 5 = block 1, offset 1: its key at page 1's K half, its value at page 1's V half.
  const std::size_t k5 = static_cast<std::size_t>(2 * BS * KVH * D + KVH * D);
  const std::size_t v5 = k5 + static_cast<std::size_t>(BS * KVH * D);
  EXPECT_EQ(pages[k5], key[0]);
  EXPECT_EQ(pages[v5], value[0]);
}
TEST_F(WriteKvValidation, Fp8SplitNeedsHeadSizeMultipleOf16) {
  // make_kv_cache is where a split fp8 cache with head 40 is described (x = 16).
  KVCacheSpec spec;
  spec.layout = KVLayout::kSplit;
  spec.num_blocks = 2;
  spec.block_size = 16;
  spec.num_kv_heads = 1;
  spec.head_size = 40;
  spec.dtype = DType::kFloat8E4M3;
  auto c = make_kv_cache(spec, nullptr, nullptr);
  EXPECT_REJECTED(c.status(), StatusCode::kUnsupported, "head_size");
  spec.dtype = DType::kFloat16;  // x = 8 divides 40
  EXPECT_TRUE(make_kv_cache(spec, nullptr, nullptr).ok());
}
TEST_F(WriteKvValidation, NegativeSlotsAnywhereAreSkippedAndExtraRowsIgnored) {
  // CUDA-graph padding: key has more rows than slot_mapping; the count comes from the latter.
  std::vector<std::int64_t> two = {-5, 3};
  sm = TensorView::contiguous(two.data(), DType::kInt64, {2});
  ASSERT_TRUE(write_kv(k, v, sm, cache).ok());
  std::size_t changed = 0;
  for (std::size_t i = 0; i < key_cache.size(); ++i) changed += key_cache[i] != 0x7E00;
  EXPECT_EQ(changed, static_cast<std::size_t>(KVH * D)) << "only row 1 (slot 3) is written";
  EXPECT_EQ(key_cache[3 * KVH * D], key[KVH * D]);
}

// ===================================================================== merge
TEST(MergeValidation, ShapeDtypeAndDeviceRules) {
  std::vector<float> a(2 * 2 * 8, 1.0f), b(2 * 2 * 8, 2.0f), o(2 * 2 * 8, kNaN);
  std::vector<float> la(4, 0.0f), lb(4, 0.0f), lo(4, kNaN);
  const TensorView oa = TensorView::contiguous(a.data(), DType::kFloat32, {2, 2, 8});
  const TensorView ob = TensorView::contiguous(b.data(), DType::kFloat32, {2, 2, 8});
  const TensorView oo = TensorView::contiguous(o.data(), DType::kFloat32, {2, 2, 8});
  const TensorView va = TensorView::contiguous(la.data(), DType::kFloat32, {2, 2});
  const TensorView vb = TensorView::contiguous(lb.data(), DType::kFloat32, {2, 2});
  const TensorView vo = TensorView::contiguous(lo.data(), DType::kFloat32, {2, 2});
  ASSERT_TRUE(merge_attention_states(oa, va, ob, vb, oo, vo).ok());
  o.assign(o.size(), kNaN);
  lo.assign(lo.size(), kNaN);
  const auto o_before = bytes_of(o), lo_before = bytes_of(lo);

  TensorView bad = ob;
  bad.shape[2] = 4;
  EXPECT_REJECTED(merge_attention_states(oa, va, bad, vb, oo, vo), StatusCode::kInvalidArgument,
                  "out_b");
  bad = ob;
  bad.dtype = DType::kFloat16;
  EXPECT_REJECTED(merge_attention_states(oa, va, bad, vb, oo, vo), StatusCode::kInvalidArgument,
                  "out_b.dtype");
  TensorView bad_lse = vb;
  bad_lse.dtype = DType::kFloat16;
  EXPECT_REJECTED(merge_attention_states(oa, va, ob, bad_lse, oo, vo), StatusCode::kInvalidArgument,
                  "lse_b.dtype");
  bad_lse = va;
  bad_lse.shape[1] = 3;
  EXPECT_REJECTED(merge_attention_states(oa, bad_lse, ob, vb, oo, vo), StatusCode::kInvalidArgument,
                  "lse_a.shape[1]");
  bad = oo;
  bad.device = Device::cuda(0);
  EXPECT_REJECTED(merge_attention_states(oa, va, ob, vb, bad, vo), StatusCode::kInvalidArgument,
                  "out.device");
  EXPECT_REJECTED(merge_attention_states(oa, TensorView{}, ob, vb, oo, vo),
                  StatusCode::kInvalidArgument, "lse_a");
  EXPECT_TRUE(bytes_of(o) == o_before);
  EXPECT_TRUE(bytes_of(lo) == lo_before);
}

// ===================================================================== describe / make
TEST(CacheValidation, KvCacheElementsRejectsBadSpecs) {
  KVCacheSpec spec;
  spec.num_blocks = 4;
  EXPECT_TRUE(kv_cache_elements(spec).ok());
  KVCacheSpec s = spec;
  s.num_blocks = 0;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "num_blocks");
  s = spec;
  s.block_size = 0;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "block_size");
  s = spec;
  s.page_pad = -1;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "page_pad");
  s = spec;
  s.num_blocks = std::int64_t{1} << 62;
  EXPECT_REJECTED(kv_cache_elements(s).status(), StatusCode::kInvalidArgument, "overflow");
}

TEST(CacheValidation, ParseRejectsUnknownNames) {
  EXPECT_REJECTED(parse_layout("NHD ").status(), StatusCode::kInvalidArgument, "layout");
  EXPECT_REJECTED(parse_dtype("float16").status(), StatusCode::kInvalidArgument, "float16");
}

}  // namespace
}  // namespace pagedattn
