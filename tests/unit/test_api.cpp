// Host-side API: tensor views and DLPack, cache description for every layout and padding,
// the single cache-access decision shared by writer and reader, selection invariants, and the
// merge of attention states. Expected values are computed by hand in the comments.
#include <dlpack/dlpack.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "tests/unit/synthetic_device.h"

namespace pagedattn {
namespace {

const float kNegInf = -std::numeric_limits<float>::infinity();

// ===================================================================== status / names
TEST(Status, CodesAndStrings) {
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().to_string(), "ok");
  const Status s(StatusCode::kInvalidArgument, "seq_lens[2] = 3 < query_len 5");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "invalid_argument: seq_lens[2] = 3 < query_len 5");
  // Stable numeric values: they appear in JSON output.
  EXPECT_EQ(static_cast<int>(StatusCode::kUnsupported), 2);
  EXPECT_EQ(static_cast<int>(StatusCode::kDeviceUnavailable), 3);
  EXPECT_STREQ(to_string(StatusCode::kUnsupported), "unsupported");
  EXPECT_STREQ(to_string(StatusCode::kDeviceUnavailable), "device_unavailable");
}

TEST(Names, DtypeAndLayoutRoundTrip) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                  DType::kFloat8E5M2, DType::kInt32, DType::kInt64}) {
    auto parsed = parse_dtype(to_string(d));
    ASSERT_TRUE(parsed.ok()) << to_string(d);
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_STREQ(to_string(DType::kFloat8E4M3), "fp8_e4m3");  // DESIGN.md §7 flag spelling
  for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
    auto parsed = parse_layout(to_string(l));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, l);
  }
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat8E5M2), 1u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(to_string(Device::cuda(3)), "cuda:3");
  EXPECT_FALSE(std::string(version()).empty());
}

TEST(Scale, DefaultIsInverseSqrtHeadSize) {
  EXPECT_FLOAT_EQ(default_scale(64), 0.125f);
  EXPECT_FLOAT_EQ(default_scale(256), 0.0625f);
}

// ===================================================================== tensor views
TEST(TensorView, ContiguousStridesSpanAndDescribe) {
  float buf[24];
  const TensorView t = TensorView::contiguous(buf, DType::kFloat32, {2, 3, 4});
  EXPECT_EQ(t.ndim, 3);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.span(), 24);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.defined());
  EXPECT_EQ(t.describe(), "[2, 3, 4] fp32 strides [12, 4, 1] cpu");
  EXPECT_FALSE(TensorView{}.defined());
  EXPECT_EQ(TensorView{}.numel(), 0);
}

TEST(TensorView, StridedSpanCountsTheLastReachableElement) {
  // 2 tokens 10 elements apart (6 elements of padding after each), 2 heads of 4 elements.
  const TensorView t = TensorView::strided(nullptr, DType::kFloat16, {2, 2, 4}, {10, 4, 1});
  EXPECT_FALSE(t.is_contiguous());
  EXPECT_EQ(t.span(), 10 + 4 + 3 + 1);  // last element at offset 1*10 + 1*4 + 3
  // Size-1 dimensions do not break contiguity whatever their stride.
  const TensorView u = TensorView::strided(nullptr, DType::kFloat16, {1, 2, 4}, {999, 4, 1});
  EXPECT_TRUE(u.is_contiguous());
  // An empty tensor spans nothing.
  EXPECT_EQ(TensorView::contiguous(nullptr, DType::kFloat16, {0, 4}).span(), 0);
}

// ===================================================================== DLPack
struct DlCase {
  DType dtype;
  std::uint8_t code;
  std::uint8_t bits;
};

TEST(DLPack, RoundTripEveryDtypeWithStrides) {
  const DlCase cases[] = {{DType::kFloat32, kDLFloat, 32},
                          {DType::kFloat16, kDLFloat, 16},
                          {DType::kBFloat16, kDLBfloat, 16},
                          {DType::kFloat8E4M3, kDLFloat8_e4m3fn, 8},
                          {DType::kFloat8E5M2, kDLFloat8_e5m2, 8},
                          {DType::kInt32, kDLInt, 32},
                          {DType::kInt64, kDLInt, 64}};
  std::vector<std::uint8_t> mem(4096);
  for (const DlCase& c : cases) {
    const TensorView v =
        TensorView::strided(mem.data(), c.dtype, {3, 2, 5}, {20, 8, 1}, Device::cuda(1));
    DLTensor dl{};
    to_dlpack(v, &dl);
    EXPECT_EQ(dl.dtype.code, c.code) << to_string(c.dtype);
    EXPECT_EQ(dl.dtype.bits, c.bits) << to_string(c.dtype);
    EXPECT_EQ(dl.dtype.lanes, 1);
    EXPECT_EQ(dl.device.device_type, kDLCUDA);
    EXPECT_EQ(dl.device.device_id, 1);
    EXPECT_EQ(dl.ndim, 3);
    EXPECT_EQ(dl.strides[0], 20);
    auto back = from_dlpack(dl);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->dtype, c.dtype);
    EXPECT_EQ(back->device, Device::cuda(1));
    EXPECT_EQ(back->data, v.data);
    for (int d = 0; d < 3; ++d) {
      EXPECT_EQ(back->shape[d], v.shape[d]);
      EXPECT_EQ(back->strides[d], v.strides[d]);
    }
  }
}

TEST(DLPack, NullStridesMeanDenseAndByteOffsetIsApplied) {
  std::vector<float> mem(64);
  std::int64_t shape[3] = {2, 3, 4};
  DLTensor dl{};
  dl.data = mem.data();
  dl.byte_offset = 8;
  dl.ndim = 3;
  dl.shape = shape;
  dl.strides = nullptr;
  dl.dtype = {kDLFloat, 32, 1};
  dl.device = {kDLCPU, 0};
  auto v = from_dlpack(dl);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->strides[0], 12);
  EXPECT_EQ(v->strides[1], 4);
  EXPECT_EQ(v->strides[2], 1);
  EXPECT_EQ(v->data, static_cast<void*>(mem.data() + 2));
  EXPECT_EQ(v->device, Device::cpu());
}

TEST(DLPack, RejectsWhatPagedattnCannotRepresent) {
  std::int64_t shape[7] = {1, 1, 1, 1, 1, 1, 1};
  std::int64_t strides[2] = {-4, 1};
  DLTensor dl{};
  dl.ndim = 2;
  dl.shape = shape;
  dl.dtype = {kDLFloat, 16, 1};
  dl.device = {kDLCPU, 0};
  ASSERT_TRUE(from_dlpack(dl).ok());

  DLTensor t = dl;
  t.dtype.lanes = 4;
  EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kInvalidArgument);
  t = dl;
  t.ndim = 7;
  EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kInvalidArgument);
  t = dl;
  t.strides = strides;
  EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kInvalidArgument);
  // Other formats that are also "fp8" must not be taken for the OCP ones: their NaN and
  // maximum differ (e4m3fnuz: max 240, NaN 0x80).
  for (std::uint8_t code :
       {static_cast<std::uint8_t>(kDLFloat8_e4m3fnuz),
        static_cast<std::uint8_t>(kDLFloat8_e5m2fnuz), static_cast<std::uint8_t>(kDLFloat8_e4m3),
        static_cast<std::uint8_t>(kDLFloat8_e4m3b11fnuz)}) {
    t = dl;
    t.dtype = {code, 8, 1};
    EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kUnsupported) << int(code);
  }
  t = dl;
  t.dtype = {kDLFloat, 64, 1};
  EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kUnsupported);
  t = dl;
  t.device = {kDLROCM, 0};
  EXPECT_EQ(from_dlpack(t).status().code(), StatusCode::kUnsupported);
}

// Found by fuzz/fuzz_dlpack.cpp: the address arithmetic was pointer arithmetic, undefined for
// a null data pointer with an offset and for an offset that wraps the address space.
TEST(DLPack, RejectsByteOffsetsFromNullOrPastTheAddressSpace) {
  std::vector<float> mem(4);
  std::int64_t shape[1] = {4};
  DLTensor dl{};
  dl.ndim = 1;
  dl.shape = shape;
  dl.dtype = {kDLFloat, 32, 1};
  dl.device = {kDLCPU, 0};
  ASSERT_TRUE(from_dlpack(dl).ok());  // null data, no offset: a view for planning
  dl.byte_offset = 16;
  auto null_offset = from_dlpack(dl);
  EXPECT_EQ(null_offset.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(null_offset.status().message().find("byte_offset"), std::string::npos);
  dl.data = mem.data();
  dl.byte_offset = ~std::uint64_t{0} - 2;
  EXPECT_EQ(from_dlpack(dl).status().code(), StatusCode::kInvalidArgument);
}

// Found by fuzz/fuzz_dlpack.cpp: an empty tensor is accepted whatever its other sizes, and
// numel() multiplied them (signed overflow) before it reached the 0.
TEST(DLPack, EmptyTensorWithHugeSizesHasNoElements) {
  std::int64_t shape[3] = {7, std::int64_t{1} << 61, 0};
  DLTensor dl{};
  dl.ndim = 3;
  dl.shape = shape;
  dl.dtype = {kDLFloat, 32, 1};
  dl.device = {kDLCPU, 0};
  auto v = from_dlpack(dl);
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->numel(), 0);
  EXPECT_EQ(v->span(), 0);
  // A hand-built view whose product overflows saturates instead.
  TensorView big = TensorView::contiguous(nullptr, DType::kFloat32, {1 << 30, 1 << 30, 1 << 30});
  EXPECT_EQ(big.numel(), std::numeric_limits<std::int64_t>::max());
}

// ===================================================================== caches
struct LayoutCase {
  KVLayout layout;
  DType dtype;
  std::int64_t pad;
};

std::string layout_case_name(const ::testing::TestParamInfo<LayoutCase>& info) {
  return std::string(to_string(info.param.layout)) + "_" + to_string(info.param.dtype) + "_pad" +
         std::to_string(info.param.pad);
}

class CacheLayouts : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(CacheLayouts, MakeDescribeAndAccessDecision) {
  const LayoutCase p = GetParam();
  KVCacheSpec spec;
  spec.layout = p.layout;
  spec.num_blocks = 5;
  spec.block_size = 16;
  spec.num_kv_heads = 2;
  spec.head_size = 64;
  spec.dtype = p.dtype;
  spec.page_pad = p.pad;
  const std::int64_t block = 16 * 2 * 64;
  EXPECT_EQ(kv_block_elements(spec), block);
  auto elems = kv_cache_elements(spec);
  ASSERT_TRUE(elems.ok());
  EXPECT_EQ(*elems, 5 * (block + p.pad));
  std::vector<std::uint8_t> k(static_cast<std::size_t>(*elems) * dtype_size(p.dtype));
  std::vector<std::uint8_t> v(k.size());
  auto cache = make_kv_cache(spec, k.data(), v.data(), Device::cpu(), 0.5f, 0.25f);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  EXPECT_EQ(cache->layout, p.layout);
  EXPECT_EQ(cache->k_scale, 0.5f);
  EXPECT_EQ(cache->key.stride(0), block + p.pad);
  EXPECT_EQ(cache->value.stride(0), block + p.pad);
  // Every element the views reach lies inside the allocation.
  EXPECT_LE(cache->key.span(), *elems);
  EXPECT_LE(cache->value.span(), *elems);

  const std::int64_t x = 16 / static_cast<std::int64_t>(dtype_size(p.dtype));
  switch (p.layout) {
    case KVLayout::kSplit:
      ASSERT_EQ(cache->key.ndim, 5);
      EXPECT_EQ(cache->key.shape[2], 64 / x);
      EXPECT_EQ(cache->key.shape[3], 16);
      EXPECT_EQ(cache->key.shape[4], x);
      EXPECT_EQ(cache->value.shape[2], 64);  // [blocks, heads, head_size, block_size]
      EXPECT_EQ(cache->value.shape[3], 16);
      break;
    case KVLayout::kNHD:
      EXPECT_EQ(cache->key.shape[1], 16);
      EXPECT_EQ(cache->key.shape[2], 2);
      break;
    case KVLayout::kHND:
      EXPECT_EQ(cache->key.shape[1], 2);
      EXPECT_EQ(cache->key.shape[2], 16);
      break;
  }

  auto g = describe_kv_cache(*cache);
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->num_blocks, 5);
  EXPECT_EQ(g->block_size, 16);
  EXPECT_EQ(g->num_kv_heads, 2);
  EXPECT_EQ(g->head_size, 64);
  EXPECT_EQ(g->dtype, p.dtype);
  EXPECT_EQ(g->x, p.layout == KVLayout::kSplit ? x : 0);
  EXPECT_EQ(g->num_slots(), 80);

  EXPECT_EQ(is_block_contiguous(*cache), p.pad == 0);
  const CacheAccessDecision d = decide_cache_access(*cache);
  EXPECT_EQ(d.access, p.pad == 0 ? CacheAccess::kNative : CacheAccess::kStrided);
  EXPECT_FALSE(d.reason.empty());
}

INSTANTIATE_TEST_SUITE_P(All, CacheLayouts,
                         ::testing::Values(LayoutCase{KVLayout::kSplit, DType::kFloat16, 0},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat16, 40},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat8E4M3, 0},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat32, 3},
                                           LayoutCase{KVLayout::kNHD, DType::kBFloat16, 0},
                                           LayoutCase{KVLayout::kNHD, DType::kBFloat16, 64},
                                           LayoutCase{KVLayout::kNHD, DType::kFloat8E5M2, 7},
                                           LayoutCase{KVLayout::kHND, DType::kFloat32, 0},
                                           LayoutCase{KVLayout::kHND, DType::kFloat16, 1}),
                         layout_case_name);

TEST(CacheAccess, PermutedDenseBlocksAreStrided) {
  // Blocks packed back to back (stride(0) == block elements) but tokens and heads swapped
  // inside a block: block-contiguous, yet not in nhd order, so no native fast path.
  std::vector<std::uint16_t> k(4 * 16 * 2 * 64), v(k.size());
  KVCache c;
  c.layout = KVLayout::kNHD;
  c.key = TensorView::strided(k.data(), DType::kFloat16, {4, 16, 2, 64}, {2048, 64, 1024, 1});
  c.value = TensorView::contiguous(v.data(), DType::kFloat16, {4, 16, 2, 64});
  ASSERT_TRUE(describe_kv_cache(c).ok());
  EXPECT_TRUE(is_block_contiguous(c));
  EXPECT_EQ(decide_cache_access(c).access, CacheAccess::kStrided);
  EXPECT_EQ(select_writer(c, Device::cpu()).access, CacheAccess::kStrided);
}

// ============================================== writer and reader take the same decision
class WriterReaderAgree : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(WriterReaderAgree, OnCacheAccess) {
  const LayoutCase p = GetParam();
  KVCacheSpec spec;
  spec.layout = p.layout;
  spec.num_blocks = 4;
  spec.block_size = 16;
  spec.num_kv_heads = 2;
  spec.head_size = 64;
  spec.dtype = p.dtype;
  spec.page_pad = p.pad;
  auto elems = kv_cache_elements(spec);
  ASSERT_TRUE(elems.ok());
  std::vector<std::uint8_t> k(static_cast<std::size_t>(*elems) * dtype_size(p.dtype));
  std::vector<std::uint8_t> v(k.size());
  auto cache = make_kv_cache(spec, k.data(), v.data());
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();

  const DType qd = is_fp8(p.dtype) ? DType::kFloat16 : p.dtype;
  std::vector<std::uint8_t> q(4 * 64 * dtype_size(qd)), out(q.size());
  std::vector<std::int32_t> bt = {2, 1}, sl = {20}, qsl = {0, 1};
  AttentionArgs a;
  a.query = TensorView::contiguous(q.data(), qd, {1, 4, 64});
  a.out = TensorView::contiguous(out.data(), qd, {1, 4, 64});
  a.cache = *cache;
  a.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {1, 2});
  a.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {1});
  a.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {2});
  a.params.scale = default_scale(64);
  auto plan = plan_attention(a, HostMetadata::from_args(a));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();

  const CacheAccess decided = decide_cache_access(*cache).access;
  EXPECT_EQ(plan->problem().access, decided);
  EXPECT_EQ(plan->choice().access, decided) << plan->choice().reason;
  EXPECT_EQ(select_writer(*cache, Device::cpu()).access, decided);
  // The same holds for the CUDA writer's decision, which is made on the host.
  EXPECT_EQ(select_writer(*cache, Device::cuda(0)).access, decided);
  EXPECT_EQ(decided, p.pad == 0 ? CacheAccess::kNative : CacheAccess::kStrided);
}

INSTANTIATE_TEST_SUITE_P(All, WriterReaderAgree,
                         ::testing::Values(LayoutCase{KVLayout::kSplit, DType::kFloat16, 0},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat16, 32},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat8E4M3, 0},
                                           LayoutCase{KVLayout::kSplit, DType::kFloat8E4M3, 5},
                                           LayoutCase{KVLayout::kNHD, DType::kFloat16, 0},
                                           LayoutCase{KVLayout::kNHD, DType::kBFloat16, 32},
                                           LayoutCase{KVLayout::kNHD, DType::kFloat8E5M2, 3},
                                           LayoutCase{KVLayout::kHND, DType::kFloat32, 0},
                                           LayoutCase{KVLayout::kHND, DType::kFloat32, 32},
                                           LayoutCase{KVLayout::kHND, DType::kFloat8E5M2, 0}),
                         layout_case_name);

// ===================================================================== selection
ProblemDesc decode_problem(Device dev, int head_size, DType dtype, int block_size, int max_seq) {
  ProblemDesc p;
  p.device = dev;
  p.num_heads = 32;
  p.num_kv_heads = 8;
  p.head_size = head_size;
  p.q_dtype = is_fp8(dtype) ? DType::kBFloat16 : dtype;
  p.cache_dtype = dtype;
  p.layout = KVLayout::kNHD;
  p.block_size = block_size;
  p.num_blocks = 1 + max_seq / block_size;
  p.access = CacheAccess::kNative;
  p.batch.num_seqs = 1;
  p.batch.num_tokens = 1;
  p.batch.num_decode_seqs = 1;
  p.batch.max_seq_len = max_seq;
  p.batch.max_query_len = 1;
  p.batch.total_kv_tokens = max_seq;
  return p;
}

TEST(Select, CpuTileIsIndependentOfBlockSize) {
  auto info = query_device(Device::cpu());
  ASSERT_TRUE(info.ok());
  EXPECT_GE(info->num_units, 1);
  for (int head : {32, 64, 80, 128, 256}) {
    for (DType dt : {DType::kFloat32, DType::kBFloat16, DType::kFloat8E4M3}) {
      int tile = -1;
      for (int bs : {1, 16, 32, 544, 1056, 2048, 4096}) {
        auto c = select_kernel(decode_problem(Device::cpu(), head, dt, bs, 8192), *info);
        ASSERT_TRUE(c.ok()) << c.status().to_string();
        EXPECT_EQ(c->kernel, KernelId::kCpuTiled);
        EXPECT_GT(c->tile_tokens, 0);
        EXPECT_GE(c->num_splits, 1);
        EXPECT_EQ(c->shared_memory_bytes, 0);
        EXPECT_FALSE(c->reason.empty());
        if (tile < 0) tile = c->tile_tokens;
        EXPECT_EQ(c->tile_tokens, tile)
            << "head " << head << " " << to_string(dt) << " block " << bs;
      }
    }
  }
}

TEST(Select, ForcedTileAndSplitsAreHonouredOrRejected) {
  auto info = query_device(Device::cpu());
  ASSERT_TRUE(info.ok());
  PlanOptions o;
  o.tile_tokens = 16;
  auto c = select_kernel(decode_problem(Device::cpu(), 128, DType::kFloat16, 544, 2000), *info, o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->tile_tokens, 16);
  o.num_splits = -2;
  EXPECT_EQ(select_kernel(decode_problem(Device::cpu(), 128, DType::kFloat16, 16, 100), *info, o)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  // A problem for one device and facts about another is a programming error, not a silent mix.
  EXPECT_EQ(select_kernel(decode_problem(Device::cuda(0), 128, DType::kFloat16, 16, 100), *info)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
}

TEST(Select, CudaNeverAsksForMoreSharedMemoryThanTheDeviceHas) {
  // Synthetic devices: an H100/H200 (227 KiB opt-in), an sm_86-like 99 KiB and a 48 KiB one.
  for (std::int64_t limit : {232448LL, 101376LL, 49152LL}) {
    const DeviceInfo info = testing::synthetic_cuda_device(limit);
    for (int head : {32, 64, 128, 192, 256}) {
      for (DType dt : {DType::kFloat32, DType::kFloat16, DType::kFloat8E5M2}) {
        int tile = -1;
        for (int bs : {1, 16, 544, 2048}) {
          auto c = select_kernel(decode_problem(Device::cuda(0), head, dt, bs, 131072), info);
          if (!c.ok()) {
            // Refusing is allowed; exceeding the limit is not.
            EXPECT_EQ(c.status().code(), StatusCode::kUnsupported) << c.status().to_string();
            continue;
          }
          EXPECT_LE(c->shared_memory_bytes, limit)
              << "head " << head << " " << to_string(dt) << " block " << bs;
          EXPECT_GT(c->tile_tokens, 0);
          if (tile < 0) tile = c->tile_tokens;
          EXPECT_EQ(c->tile_tokens, tile) << "tile must not follow block_size " << bs;
        }
      }
    }
  }
}

// ===================================================================== merge
/// Merge on CPU fp32 tensors of [1, heads, 2].
struct MergeIo {
  std::vector<float> a, b, out, la, lb, lo;
  Status run(int heads, bool with_lse_out = true) {
    out.assign(static_cast<std::size_t>(heads) * 2, std::numeric_limits<float>::quiet_NaN());
    lo.assign(static_cast<std::size_t>(heads), std::numeric_limits<float>::quiet_NaN());
    const std::int64_t h = heads;
    return merge_attention_states(
        TensorView::contiguous(a.data(), DType::kFloat32, {1, h, 2}),
        TensorView::contiguous(la.data(), DType::kFloat32, {1, h}),
        TensorView::contiguous(b.data(), DType::kFloat32, {1, h, 2}),
        TensorView::contiguous(lb.data(), DType::kFloat32, {1, h}),
        TensorView::contiguous(out.data(), DType::kFloat32, {1, h, 2}),
        with_lse_out ? TensorView::contiguous(lo.data(), DType::kFloat32, {1, h}) : TensorView{});
  }
};

TEST(Merge, WeightsByExpOfLse) {
  MergeIo m;
  // Head 0: lse_a = log 1, lse_b = log 3 -> lse = log 4, weights 1/4 and 3/4:
  //   out = 0.25 * (1, 2) + 0.75 * (3, 4) = (2.5, 3.5).
  // Head 1: lse_a = lse_b = 1000 (e^1000 overflows a float; the merge must not form it):
  //   equal weights, out = ((5 + 7) / 2, (6 + 8) / 2) = (6, 7), lse = 1000 + log 2.
  m.a = {1, 2, 5, 6};
  m.b = {3, 4, 7, 8};
  m.la = {0.0f, 1000.0f};
  m.lb = {std::log(3.0f), 1000.0f};
  ASSERT_TRUE(m.run(2).ok());
  EXPECT_NEAR(m.out[0], 2.5f, 1e-6);
  EXPECT_NEAR(m.out[1], 3.5f, 1e-6);
  EXPECT_NEAR(m.lo[0], std::log(4.0f), 1e-6);
  EXPECT_NEAR(m.out[2], 6.0f, 1e-5);
  EXPECT_NEAR(m.out[3], 7.0f, 1e-5);
  EXPECT_NEAR(m.lo[1], 1000.0f + std::log(2.0f), 1e-3);
}

TEST(Merge, MinusInfinityStatesContributeNothing) {
  MergeIo m;
  // Head 0: a is empty (-inf) -> exactly b. Head 1: b is empty -> exactly a.
  // Head 2: both empty -> out 0 and lse -inf (DESIGN.md §8), never NaN from -inf - -inf.
  m.a = {1, 2, 3, 4, 5, 6};
  m.b = {7, 8, 9, 10, 11, 12};
  m.la = {kNegInf, 0.5f, kNegInf};
  m.lb = {2.0f, kNegInf, kNegInf};
  ASSERT_TRUE(m.run(3).ok());
  EXPECT_EQ(m.out[0], 7.0f);
  EXPECT_EQ(m.out[1], 8.0f);
  EXPECT_EQ(m.lo[0], 2.0f);
  EXPECT_EQ(m.out[2], 3.0f);
  EXPECT_EQ(m.out[3], 4.0f);
  EXPECT_EQ(m.lo[1], 0.5f);
  EXPECT_EQ(m.out[4], 0.0f);
  EXPECT_EQ(m.out[5], 0.0f);
  EXPECT_EQ(m.lo[2], kNegInf);
}

TEST(Merge, LseOutIsOptionalAndOutMayAliasAnInput) {
  std::vector<float> a = {1, 2}, b = {3, 4}, la = {0.0f}, lb = {std::log(3.0f)};
  const TensorView va = TensorView::contiguous(a.data(), DType::kFloat32, {1, 1, 2});
  ASSERT_TRUE(merge_attention_states(va, TensorView::contiguous(la.data(), DType::kFloat32, {1, 1}),
                                     TensorView::contiguous(b.data(), DType::kFloat32, {1, 1, 2}),
                                     TensorView::contiguous(lb.data(), DType::kFloat32, {1, 1}), va,
                                     TensorView{})
                  .ok());
  EXPECT_NEAR(a[0], 2.5f, 1e-6);
  EXPECT_NEAR(a[1], 3.5f, 1e-6);
}

TEST(Merge, Bf16Outputs) {
  // (1, 2) and (3, 4) with weights 1/4, 3/4 -> (2.5, 3.5), exact in bf16.
  std::vector<std::uint16_t> a = {numeric::float_to_bf16_bits(1), numeric::float_to_bf16_bits(2)};
  std::vector<std::uint16_t> b = {numeric::float_to_bf16_bits(3), numeric::float_to_bf16_bits(4)};
  std::vector<std::uint16_t> o(2, 0x7FC0);
  std::vector<float> la = {0.0f}, lb = {std::log(3.0f)}, lo = {0.0f};
  ASSERT_TRUE(merge_attention_states(TensorView::contiguous(a.data(), DType::kBFloat16, {1, 1, 2}),
                                     TensorView::contiguous(la.data(), DType::kFloat32, {1, 1}),
                                     TensorView::contiguous(b.data(), DType::kBFloat16, {1, 1, 2}),
                                     TensorView::contiguous(lb.data(), DType::kFloat32, {1, 1}),
                                     TensorView::contiguous(o.data(), DType::kBFloat16, {1, 1, 2}),
                                     TensorView::contiguous(lo.data(), DType::kFloat32, {1, 1}))
                  .ok());
  EXPECT_EQ(numeric::bf16_bits_to_float(o[0]), 2.5f);
  EXPECT_EQ(numeric::bf16_bits_to_float(o[1]), 3.5f);
}

// ===================================================================== convenience paths
TEST(HostMetadata, FromArgsTakesTheArgsOwnViews) {
  std::int32_t bt[2] = {0, 1}, sl[1] = {3}, qsl[2] = {0, 1};
  AttentionArgs a;
  a.block_table = TensorView::contiguous(bt, DType::kInt32, {1, 2});
  a.seq_lens = TensorView::contiguous(sl, DType::kInt32, {1});
  a.query_start_loc = TensorView::contiguous(qsl, DType::kInt32, {2});
  const HostMetadata h = HostMetadata::from_args(a);
  EXPECT_EQ(h.block_table.data, static_cast<void*>(bt));
  EXPECT_EQ(h.seq_lens.data, static_cast<void*>(sl));
  EXPECT_EQ(h.query_start_loc.data, static_cast<void*>(qsl));
}

}  // namespace
}  // namespace pagedattn

namespace pagedattn {
namespace {

// Batch invariance chooses its own split points on every kernel; a forced split count would be
// honoured by one kernel and overridden by another, so the pair is refused up front.
TEST(PlanOptionsRules, BatchInvariantWithForcedSplitsIsRefused) {
  ProblemDesc p;
  p.device = Device::cpu();
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_size = 64;
  p.block_size = 16;
  p.num_blocks = 4;
  p.batch.num_seqs = 1;
  p.batch.num_tokens = 1;
  p.batch.num_decode_seqs = 1;
  p.batch.max_seq_len = 40;
  p.batch.max_query_len = 1;
  p.batch.total_kv_tokens = 40;
  DeviceInfo info;
  info.device = Device::cpu();
  PlanOptions o;
  o.batch_invariant = true;
  EXPECT_TRUE(select_kernel(p, info, o).ok());
  o.num_splits = 4;
  auto r = select_kernel(p, info, o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("num_splits = 4 with batch_invariant"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace pagedattn
