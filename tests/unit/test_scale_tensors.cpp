// Validation of KVCache::k_scales / v_scales (device-resident fp8 scales): every rule rejects
// with kInvalidArgument naming the tensor, and a rejected write_kv or attention call writes
// nothing. The fixture's own tensors ([1] and [num_kv_heads]) are accepted first.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace {

class ScaleTensorValidation : public ::testing::Test {
 protected:
  static constexpr int H = 4, KVH = 2, D = 16, BS = 4, NB = 4, N = 2;

  void SetUp() override {
    kc.assign(NB * BS * KVH * D, 0x7F);  // e4m3 NaN: a rejected write leaves it so
    vc.assign(NB * BS * KVH * D, 0x7F);
    src.assign(N * KVH * D, 0.25f);
    query.assign(N * H * D, 0.5f);
    out.assign(N * H * D, -7.0f);
    lse.assign(N * H, -7.0f);
    ks = {0.5f, 2.0f};
    vs = {0.25f, 4.0f};
    slots = {0, 4};       // token 0 of blocks 0 and 1
    block_table = {0, 1};  // sequence s reads block s
    seq_lens = {1, 1};
    qsl = {0, 1, 2};
    cache.layout = KVLayout::kNHD;
    cache.key = TensorView::contiguous(kc.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
    cache.value = TensorView::contiguous(vc.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
    cache.k_scales = TensorView::contiguous(ks.data(), DType::kFloat32, {KVH});
    cache.v_scales = TensorView::contiguous(vs.data(), DType::kFloat32, {KVH});
  }

  Status write() {
    const TensorView k = TensorView::contiguous(src.data(), DType::kFloat32, {N, KVH, D});
    const TensorView sm = TensorView::contiguous(slots.data(), DType::kInt64, {N});
    return write_kv(k, k, sm, cache);
  }
  Status attend() {
    AttentionArgs a;
    a.query = TensorView::contiguous(query.data(), DType::kFloat32, {N, H, D});
    a.out = TensorView::contiguous(out.data(), DType::kFloat32, {N, H, D});
    a.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {N, H});
    a.cache = cache;
    a.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {2, 1});
    a.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
    a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
    a.params.scale = default_scale(D);
    return paged_attention(a, HostMetadata::from_args(a));
  }

  /// Both calls rejected with kInvalidArgument naming `name`; nothing written.
  void ExpectRejected(const std::string& name) {
    const std::vector<std::uint8_t> k0 = kc, v0 = vc;
    const std::vector<float> o0 = out, l0 = lse;
    for (const Status& st : {write(), attend()}) {
      EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
      EXPECT_NE(st.message().find(name), std::string::npos)
          << "message \"" << st.message() << "\" lacks \"" << name << "\"";
    }
    EXPECT_TRUE(kc == k0 && vc == v0) << "a rejected write_kv changed the cache";
    EXPECT_TRUE(out == o0 && lse == l0) << "a rejected attention call wrote its outputs";
  }

  std::vector<std::uint8_t> kc, vc;
  std::vector<float> src, query, out, lse, ks, vs;
  std::vector<std::int64_t> slots;
  std::vector<std::int32_t> block_table, seq_lens, qsl;
  KVCache cache;
};

TEST_F(ScaleTensorValidation, PerHeadAndPerTensorScalesAreAccepted) {
  ASSERT_TRUE(write().ok());
  ASSERT_TRUE(attend().ok());
  for (float v : out) EXPECT_EQ(v, v) << "NaN output: a scale was not applied or a slot missed";
  cache.k_scales = TensorView::contiguous(ks.data(), DType::kFloat32, {1});
  cache.v_scales = TensorView::contiguous(vs.data(), DType::kFloat32, {1});
  EXPECT_TRUE(write().ok());
  EXPECT_TRUE(attend().ok());
}
TEST_F(ScaleTensorValidation, OnlyOneOfThePair) {
  cache.v_scales = TensorView{};
  ExpectRejected("v_scales");
  cache.v_scales = cache.k_scales;
  cache.k_scales = TensorView{};
  ExpectRejected("k_scales");
}
TEST_F(ScaleTensorValidation, NotFp32) {
  cache.k_scales.dtype = DType::kFloat16;
  ExpectRejected("k_scales.dtype");
}
TEST_F(ScaleTensorValidation, WrongShape) {
  std::vector<float> three = {1, 2, 3};
  cache.v_scales = TensorView::contiguous(three.data(), DType::kFloat32, {3});
  ExpectRejected("v_scales");
  cache.v_scales = TensorView::contiguous(vs.data(), DType::kFloat32, {KVH, 1});
  ExpectRejected("v_scales");
}
TEST_F(ScaleTensorValidation, ShapesOfThePairDiffer) {
  cache.v_scales = TensorView::contiguous(vs.data(), DType::kFloat32, {1});
  ExpectRejected("v_scales");
}
TEST_F(ScaleTensorValidation, NotContiguous) {
  std::vector<float> gappy = {0.5f, 9.0f, 2.0f, 9.0f};
  cache.k_scales = TensorView::strided(gappy.data(), DType::kFloat32, {KVH}, {2});
  ExpectRejected("k_scales");
}
TEST_F(ScaleTensorValidation, OnAnotherDevice) {
  cache.k_scales.device = Device::cuda(0);
  ExpectRejected("k_scales.device");
}
TEST_F(ScaleTensorValidation, NullData) {
  cache.v_scales.data = nullptr;
  ExpectRejected("v_scales.data");
}
TEST_F(ScaleTensorValidation, NotAnFp8Cache) {
  std::vector<std::uint16_t> hk(NB * BS * KVH * D, 0x7E00), hv(NB * BS * KVH * D, 0x7E00);
  cache.key = TensorView::contiguous(hk.data(), DType::kFloat16, {NB, BS, KVH, D});
  cache.value = TensorView::contiguous(hv.data(), DType::kFloat16, {NB, BS, KVH, D});
  auto g = describe_kv_cache(cache);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(g.status().message().find("k_scales"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("fp8"), std::string::npos) << g.status().message();
}

}  // namespace
}  // namespace pagedattn
