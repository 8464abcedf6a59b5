// Negative tests, one per validation rule (DESIGN.md §3 "Errors", §4 "Negative tests"): each
// asserts the exact StatusCode, a message fragment naming the argument, and that the call
// changed nothing (cache, out and lse bytes are compared before and after). Each fixture first
// proves that its unmodified arguments are accepted, so every rejection below is caused by the
// one thing the test breaks.
//
// This file: the arguments of plan_attention / run_attention (query, out, lse, cache,
// metadata, scalars, per-head tensors, devices, plan/run consistency).
#include "tests/unit/validation_fixtures.h"

namespace pagedattn {
namespace {

using namespace validation_test;  // NOLINT: the fixtures, helpers and constants

TEST_F(AttentionValidation, FixtureIsAcceptedAndWritesEveryRow) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {H});
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H});
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(st.ok()) << st.to_string();
  for (std::uint16_t h : out) ASSERT_FALSE(std::isnan(numeric::half_bits_to_float(h)));
  for (float v : lse) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(bytes_of(key_cache) == key_before) << "attention must not write the cache";
}

// ---- query
TEST_F(AttentionValidation, QueryWrongNdim) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {T, H * D});
  Expect(StatusCode::kInvalidArgument, "query.ndim");
}
TEST_F(AttentionValidation, QueryAbsent) {
  args.query = TensorView{};
  Expect(StatusCode::kInvalidArgument, "query");
}
TEST_F(AttentionValidation, QueryIntegerDtype) {
  args.query.dtype = DType::kInt32;
  Expect(StatusCode::kInvalidArgument, "query.dtype");
}
TEST_F(AttentionValidation, QueryFp8DtypeIsNotAQueryDtype) {
  args.query.dtype = DType::kFloat8E4M3;
  Expect(StatusCode::kInvalidArgument, "query.dtype");
}
TEST_F(AttentionValidation, QueryLastDimNotContiguous) {
  args.query = TensorView::strided(query.data(), DType::kFloat16, {T, H, D / 2}, {H * D, D, 2});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T, H, D / 2});
  Expect(StatusCode::kInvalidArgument, "query.strides[2]");
}
TEST_F(AttentionValidation, QueryNegativeStride) {
  args.query.strides[0] = -H * D;
  Expect(StatusCode::kInvalidArgument, "query.strides[0]");
}
TEST_F(AttentionValidation, QueryNullDataIsCaughtBeforeAnyWrite) {
  args.query.data = nullptr;
  Expect(StatusCode::kInvalidArgument, "query.data");
}

// ---- out / lse
TEST_F(AttentionValidation, OutWrongShape) {
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T - 1, H, D});
  Expect(StatusCode::kInvalidArgument, "out.shape[0]");
}
TEST_F(AttentionValidation, OutDtypeDiffersFromQuery) {
  args.out.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "out.dtype");
}
TEST_F(AttentionValidation, OutAbsent) {
  args.out = TensorView{};
  Expect(StatusCode::kInvalidArgument, "out");
}
TEST_F(AttentionValidation, OutLastDimNotContiguous) {
  args.out.strides[2] = 2;
  args.out.strides[1] = 2 * D;
  args.out.strides[0] = 2 * D * H;
  args.out.shape[0] = 1;  // keep the span inside the buffer
  args.query.shape[0] = 1;
  qsl = {0, 1, 1};
  Expect(StatusCode::kInvalidArgument, "out.strides[2]");
}
TEST_F(AttentionValidation, LseWrongDtype) {
  args.lse.dtype = DType::kFloat16;
  Expect(StatusCode::kInvalidArgument, "lse.dtype");
}
TEST_F(AttentionValidation, LseWrongNdim) {
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T * H});
  Expect(StatusCode::kInvalidArgument, "lse.ndim");
}
TEST_F(AttentionValidation, LseWrongShape) {
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H - 1});
  Expect(StatusCode::kInvalidArgument, "lse.shape[1]");
}

// ---- cache
TEST_F(AttentionValidation, KeyCacheWrongNdim) {
  args.cache.key = TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, BS, KVH * D});
  Expect(StatusCode::kInvalidArgument, "key_cache.ndim");
}
TEST_F(AttentionValidation, SplitKeyCacheNeedsFiveDims) {
  args.cache.layout = KVLayout::kSplit;
  // nhd-shaped tensors are 4-D; split's key is [blocks, heads, D/x, block, x].
  Expect(StatusCode::kInvalidArgument, "key_cache.ndim");
}
TEST_F(AttentionValidation, SplitKeyCacheWrongX) {
  args.cache.layout = KVLayout::kSplit;
  args.cache.key =
      TensorView::contiguous(key_cache.data(), DType::kFloat16, {NB, KVH, D / 4, BS, 4});
  args.cache.value = TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, KVH, D, BS});
  Expect(StatusCode::kInvalidArgument, "key_cache.shape[4]");
}
TEST_F(AttentionValidation, ValueCacheShapeDiffersFromKey) {
  args.cache.value =
      TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB / 2, BS, KVH, D});
  Expect(StatusCode::kInvalidArgument, "value_cache.shape[0]");
}
TEST_F(AttentionValidation, CacheDtypeDiffersFromQuery) {
  args.cache.key.dtype = DType::kBFloat16;
  args.cache.value.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "key_cache.dtype");
}
TEST_F(AttentionValidation, KeyAndValueCacheDtypesDiffer) {
  args.cache.value.dtype = DType::kBFloat16;
  Expect(StatusCode::kInvalidArgument, "value_cache.dtype");
}
TEST_F(AttentionValidation, CacheIntegerDtype) {
  args.cache.key.dtype = DType::kInt32;
  args.cache.value.dtype = DType::kInt32;
  Expect(StatusCode::kInvalidArgument, "key_cache.dtype");
}
TEST_F(AttentionValidation, CacheInnerDimNotContiguous) {
  args.cache.key = TensorView::strided(key_cache.data(), DType::kFloat16, {NB, BS, KVH, D / 2},
                                       {BS * KVH * D, KVH * D, D, 2});
  args.cache.value =
      TensorView::contiguous(value_cache.data(), DType::kFloat16, {NB, BS, KVH, D / 2});
  Expect(StatusCode::kInvalidArgument, "key_cache.strides[3]");
}
TEST_F(AttentionValidation, OverlappingBlocks) {
  // stride(0) smaller than one block: block b+1 would start inside block b.
  args.cache.key.strides[0] = BS * KVH * D / 2;
  Expect(StatusCode::kInvalidArgument, "overlap");
}
TEST_F(AttentionValidation, NumHeadsNotAMultipleOfKvHeads) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {1, 3, D});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {1, 3, D});
  args.lse = TensorView{};
  qsl = {0, 1, 1};
  Expect(StatusCode::kInvalidArgument, "not a multiple of num_kv_heads");
}
TEST_F(AttentionValidation, HeadSizeDiffersBetweenQueryAndCache) {
  args.query = TensorView::contiguous(query.data(), DType::kFloat16, {T, H / 2, 2 * D});
  args.out = TensorView::contiguous(out.data(), DType::kFloat16, {T, H / 2, 2 * D});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {T, H / 2});
  Expect(StatusCode::kInvalidArgument, "head_size");
}
TEST_F(AttentionValidation, HeadSizeAbove512IsUnsupported) {
  // 520 = 65 * 8: a multiple of 8 but past the supported range. Planning reads shapes only.
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 520});
  args.out = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 520});
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 520});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
  ExpectUntouched();
}
TEST_F(AttentionValidation, NumHeadsAboveInt32IsRejected) {
  // Stride-0 views: a shape the kernels' 32-bit head index cannot hold, without the memory.
  const std::int64_t heads = (std::int64_t{1} << 32) + 2;
  args.query = TensorView::strided(query.data(), DType::kFloat16, {T, heads, D}, {0, 0, 1});
  args.out = TensorView::strided(nullptr, DType::kFloat16, {T, heads, D}, {heads * D, D, 1});
  args.lse = TensorView{};
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kInvalidArgument, "num_heads");
  ExpectUntouched();
}
TEST_F(AttentionValidation, SplitHeadSizeIsCheckedBeforeItIsNarrowed) {
  // key_cache.shape[2] * x = (2^29 + 1) * 8 would wrap to 8 in 32 bits.
  args.cache.layout = KVLayout::kSplit;
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16,
                                          {NB, KVH, (std::int64_t{1} << 29) + 1, BS, 8});
  args.cache.value = TensorView::contiguous(nullptr, DType::kFloat16, {NB, KVH, 8, BS});
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
  ExpectUntouched();
}
TEST_F(AttentionValidation, HeadSizeNotAMultipleOf8IsUnsupported) {
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 20});
  args.out = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 20});
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 20});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kUnsupported, "head_size");
}
TEST_F(AttentionValidation, ZeroHeadSize) {
  args.query = TensorView::contiguous(nullptr, DType::kFloat16, {T, H, 0});
  args.out = args.query;
  args.cache.key = TensorView::contiguous(nullptr, DType::kFloat16, {NB, BS, KVH, 0});
  args.cache.value = args.cache.key;
  EXPECT_REJECTED(plan_attention(args, HostMetadata::from_args(args)).status(),
                  StatusCode::kInvalidArgument, "key_cache.shape[3]");
}
TEST_F(AttentionValidation, Fp8ScaleNotPositive) {
  std::vector<std::uint8_t> k8(NB * BS * KVH * D, 0x38), v8(NB * BS * KVH * D, 0x38);
  args.cache.key = TensorView::contiguous(k8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  args.cache.value = TensorView::contiguous(v8.data(), DType::kFloat8E4M3, {NB, BS, KVH, D});
  for (float bad : {0.0f, -1.0f, kNaN, kInf}) {
    args.cache.k_scale = bad;
    args.cache.v_scale = 1.0f;
    Expect(StatusCode::kInvalidArgument, "k_scale");
    args.cache.k_scale = 1.0f;
    args.cache.v_scale = bad;
    Expect(StatusCode::kInvalidArgument, "v_scale");
  }
  args.cache.v_scale = 1.0f;
  EXPECT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok())
      << "the fp8 variant of the fixture must be accepted";
}

// ---- metadata tensors (shapes and dtypes)
TEST_F(AttentionValidation, BlockTableInt64) {
  args.block_table.dtype = DType::kInt64;
  Expect(StatusCode::kInvalidArgument, "block_table.dtype");
}
TEST_F(AttentionValidation, BlockTableWrongNdim) {
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {4});
  Expect(StatusCode::kInvalidArgument, "block_table.ndim");
}
TEST_F(AttentionValidation, BlockTableRowsDifferFromNumSeqs) {
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {1, 2});
  Expect(StatusCode::kInvalidArgument, "block_table.shape[0]");
}
TEST_F(AttentionValidation, SeqLensInt64) {
  args.seq_lens.dtype = DType::kInt64;
  Expect(StatusCode::kInvalidArgument, "seq_lens.dtype");
}
TEST_F(AttentionValidation, SeqLensWrongNdim) {
  args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2, 1});
  Expect(StatusCode::kInvalidArgument, "seq_lens.ndim");
}
TEST_F(AttentionValidation, QueryStartLocWrongLength) {
  args.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {2});
  Expect(StatusCode::kInvalidArgument, "query_start_loc.shape[0]");
}
TEST_F(AttentionValidation, QueryStartLocFloatDtype) {
  args.query_start_loc.dtype = DType::kFloat32;
  Expect(StatusCode::kInvalidArgument, "query_start_loc.dtype");
}
TEST_F(AttentionValidation, HostMetadataShapeDiffersFromArgs) {
  HostMetadata host = HostMetadata::from_args(args);
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {1});
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kInvalidArgument, "seq_lens");
  ExpectUntouched();
}
TEST_F(AttentionValidation, HostMetadataOnTheGpuIsRejected) {
  HostMetadata host = HostMetadata::from_args(args);
  host.block_table.device = Device::cuda(0);
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kInvalidArgument, "block_table");
  ExpectUntouched();
}

// ---- metadata values (checked in plan from the host copies)
TEST_F(AttentionValidation, QueryStartLocNotStartingAtZero) {
  qsl = {1, 2, 3};
  Expect(StatusCode::kInvalidArgument, "query_start_loc[0]");
}
TEST_F(AttentionValidation, QueryStartLocDecreasing) {
  // 0, 3, 2, 3: the middle step goes backwards.
  std::vector<std::int32_t> q4 = {0, 3, 2, 3};
  std::vector<std::int32_t> s3 = {5, 3, 3};
  std::vector<std::int32_t> bt3 = {3, 6, 1, 0, 2, 0};
  args.query_start_loc = TensorView::contiguous(q4.data(), DType::kInt32, {4});
  args.seq_lens = TensorView::contiguous(s3.data(), DType::kInt32, {3});
  args.block_table = TensorView::contiguous(bt3.data(), DType::kInt32, {3, 2});
  Expect(StatusCode::kInvalidArgument, "non-decreasing");
}
TEST_F(AttentionValidation, QueryStartLocLastIsNotNumTokens) {
  qsl = {0, 2, 2};
  Expect(StatusCode::kInvalidArgument, "query_start_loc[2]");
}
TEST_F(AttentionValidation, SeqLenShorterThanQueryLen) {
  seq_lens = {1, 3};  // sequence 0 has 2 new tokens
  Expect(StatusCode::kInvalidArgument, "seq_lens[0]");
}
TEST_F(AttentionValidation, NegativeSeqLen) {
  seq_lens = {5, -1};
  Expect(StatusCode::kInvalidArgument, "seq_lens[1]");
}
TEST_F(AttentionValidation, BlockTableTooNarrowForSeqLen) {
  seq_lens = {9, 3};  // 9 tokens need 3 blocks of 4; the table has 2 columns
  Expect(StatusCode::kInvalidArgument, "block_table.shape[1]");
}
TEST_F(AttentionValidation, NegativeBlockId) {
  block_table[1] = -1;
  Expect(StatusCode::kInvalidArgument, "block_table[0][1]");
}
TEST_F(AttentionValidation, BlockIdEqualToNumBlocks) {
  block_table[2] = NB;
  Expect(StatusCode::kInvalidArgument, "block_table[1][0]");
}
TEST_F(AttentionValidation, UnreadBlockTableEntriesAreNotChecked) {
  // Sequence 1 (seq_len 3) reads one block; the entry after it is never read, so any value
  // there is fine (serving engines leave stale ids). This documents the rule's exact extent.
  block_table[3] = -7;
  EXPECT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok());
}

// ---- scalar parameters
TEST_F(AttentionValidation, NegativeSoftcap) {
  args.params.softcap = -1.0f;
  Expect(StatusCode::kInvalidArgument, "softcap");
}
TEST_F(AttentionValidation, NanSoftcap) {
  args.params.softcap = kNaN;
  Expect(StatusCode::kInvalidArgument, "softcap");
}
TEST_F(AttentionValidation, NegativeWindow) {
  args.params.sliding_window = -1;
  Expect(StatusCode::kInvalidArgument, "sliding_window");
}
TEST_F(AttentionValidation, ScaleNotFinitePositive) {
  for (float bad : {0.0f, -0.125f, kNaN, kInf}) {
    args.params.scale = bad;
    Expect(StatusCode::kInvalidArgument, "scale");
  }
}

// ---- optional per-head tensors
TEST_F(AttentionValidation, AlibiWrongLength) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {H - 1});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.shape[0]");
}
TEST_F(AttentionValidation, AlibiWrongDtype) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat16, {H});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.dtype");
}
TEST_F(AttentionValidation, AlibiWrongNdim) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {1, H});
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.ndim");
}
TEST_F(AttentionValidation, SinksWrongLength) {
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H + 1});
  Expect(StatusCode::kInvalidArgument, "sinks.shape[0]");
}
TEST_F(AttentionValidation, SinksWrongDtype) {
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kBFloat16, {H});
  Expect(StatusCode::kInvalidArgument, "sinks.dtype");
}
// Values of host-resident per-head tensors: checked at run time (they may change after the
// plan), naming the element; a -inf sink means "no sink" and passes.
TEST_F(AttentionValidation, SinkNaNOrPlusInfIsRejected) {
  args.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {H});
  sinks[2] = kNaN;
  Expect(StatusCode::kInvalidArgument, "sinks[2] = nan: expected a finite value or -inf");
  sinks[2] = kInf;
  Expect(StatusCode::kInvalidArgument, "sinks[2] = inf: expected a finite value or -inf");
  sinks[2] = -kInf;
  EXPECT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok());
}
TEST_F(AttentionValidation, AlibiNonFiniteIsRejectedAtRunAfterAGoodPlan) {
  args.params.alibi_slopes = TensorView::contiguous(alibi.data(), DType::kFloat32, {H});
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<unsigned char> ws(plan->workspace_bytes());
  alibi[0] = kInf;  // changed in place after planning
  EXPECT_REJECTED(run_attention(*plan, args, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "alibi_slopes[0] = inf: expected a finite value");
  ExpectUntouched();
}

// Metadata changed in place after planning (the CPU backend reads the caller's tensors at
// run time): a sequence grown past what its block-table row holds, or shrunk below its query,
// names seq_lens, a block id out of range names its entry, changed query_start_loc names it,
// and no row of any sequence is written (the checks run before any work item, not in the
// worker that meets the change).
TEST_F(AttentionValidation, MetadataChangedAfterThePlanIsAnErrorThatWritesNothing) {
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<unsigned char> ws(plan->workspace_bytes());
  seq_lens[1] = 100;  // the last sequence: the first's rows would be written first otherwise
  EXPECT_REJECTED(run_attention(*plan, args, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "seq_lens[1] = 100 (25 blocks of 4, more than the 2 columns of block_table)");
  ExpectUntouched();
  seq_lens[1] = 3;
  block_table[2] = NB;  // sequence 1's first block
  EXPECT_REJECTED(run_attention(*plan, args, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "block_table[1][0] = 8");
  ExpectUntouched();
  block_table[2] = 1;
  seq_lens[0] = -5;
  EXPECT_REJECTED(run_attention(*plan, args, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "seq_lens[0] = -5 (below its query_len 2)");
  ExpectUntouched();
  seq_lens[0] = 5;
  qsl[1] = 1;  // sequence 0's rows were [0, 2)
  EXPECT_REJECTED(run_attention(*plan, args, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "query_start_loc[");
  ExpectUntouched();
  qsl[1] = 2;
  EXPECT_TRUE(run_attention(*plan, args, ws.data(), ws.size()).ok());  // restored: runs
}

// ---- devices
TEST_F(AttentionValidation, MixedDevicesAreRejected) {
  // The query decides the call's device; a cache elsewhere is a usage error, never a launch.
  args.cache.key.device = Device::cuda(0);
  args.cache.value.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "device");
}
TEST_F(AttentionValidation, KeyAndValueCacheOnDifferentDevices) {
  args.cache.value.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "value_cache.device");
}
TEST_F(AttentionValidation, EmptyBatchIsANoOp) {
  // No sequences at all: valid, and nothing is written.
  UseEmptyBatch(TensorView::contiguous(out.data(), DType::kFloat16, {0, H, D}),
                TensorView::contiguous(lse.data(), DType::kFloat32, {0, H}));
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  EXPECT_TRUE(st.ok()) << st.to_string();
  ExpectUntouched();
}
TEST_F(AttentionValidation, EmptyOutputsWithBroadcastStridesAreAccepted) {
  // Zero-element outputs have no two elements at one address, whatever their strides (an
  // empty tensor expanded over heads: stride 0 in a dimension of extent > 1). Rejecting them
  // as "elements overlap" fails an empty batch (e.g. a padded CUDA-graph step) for nothing.
  UseEmptyBatch(TensorView::strided(out.data(), DType::kFloat16, {0, H, D}, {D, 0, 1}),
                TensorView::strided(lse.data(), DType::kFloat32, {0, H}, {1, 0}));
  const Status st = paged_attention(args, HostMetadata::from_args(args));
  EXPECT_TRUE(st.ok()) << st.to_string();
  ExpectUntouched();
  // The merge too.
  std::vector<float> a(8), la(8);
  const TensorView oa = TensorView::contiguous(a.data(), DType::kFloat32, {0, H, D});
  const TensorView l = TensorView::contiguous(la.data(), DType::kFloat32, {0, H});
  const TensorView o = TensorView::strided(out.data(), DType::kFloat32, {0, H, D}, {D, 0, 1});
  const TensorView lo = TensorView::strided(lse.data(), DType::kFloat32, {0, H}, {1, 0});
  const Status ms = merge_attention_states(oa, l, oa, l, o, lo);
  EXPECT_TRUE(ms.ok()) << ms.to_string();
}
TEST_F(AttentionValidation, OutOnAnotherDevice) {
  args.out.device = Device::cuda(0);
  Expect(StatusCode::kInvalidArgument, "out.device");
}
TEST_F(AttentionValidation, AlibiOnAnotherDevice) {
  args.params.alibi_slopes =
      TensorView::contiguous(alibi.data(), DType::kFloat32, {H}, Device::cuda(0));
  Expect(StatusCode::kInvalidArgument, "alibi_slopes.device");
}
TEST_F(AttentionValidation, CudaTensorsWithoutCudaAreDeviceUnavailable) {
  // Runs in builds without CUDA and in CUDA builds on machines without a GPU.
  if (query_device(Device::cuda(0)).ok()) GTEST_SKIP() << "a GPU is present";
  const Device gpu = Device::cuda(0);
  for (TensorView* t : {&args.query, &args.out, &args.lse, &args.cache.key, &args.cache.value,
                        &args.block_table, &args.seq_lens, &args.query_start_loc})
    t->device = gpu;
  // Host copies of the metadata stay on the CPU, as serving engines keep them.
  HostMetadata host;
  host.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {2, 2});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
  host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {3});
  EXPECT_REJECTED(paged_attention(args, host), StatusCode::kDeviceUnavailable, "CUDA");
  ExpectUntouched();
}

// ---- plan / run consistency
TEST_F(AttentionValidation, PlanOptionsNegative) {
  PlanOptions o;
  o.tile_tokens = -1;
  EXPECT_REJECTED(paged_attention(args, HostMetadata::from_args(args), nullptr, o),
                  StatusCode::kInvalidArgument, "tile_tokens");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithAnEmptyPlan) {
  EXPECT_REJECTED(run_attention(AttentionPlan{}, args, nullptr, 0), StatusCode::kInvalidArgument,
                  "plan");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithArgsOfAnotherShape) {
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  AttentionArgs other = args;
  other.params.sliding_window = 2;  // the plan was made without a window
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "sliding_window");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithABlockTableOfAnotherWidth) {
  // run_attention documents that args must have the shapes the plan was made for; the block
  // table's width is one of them (a plan's work list was built from the old rows).
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  std::vector<std::int32_t> wide = {3, 6, 0, 1, 0, 0};
  AttentionArgs other = args;
  other.block_table = TensorView::contiguous(wide.data(), DType::kInt32, {2, 3});
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "block_table.shape[1]");
  ExpectUntouched();
}
TEST_F(AttentionValidation, RunWithNullOutData) {
  auto plan = plan_attention(args, HostMetadata::from_args(args));
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  AttentionArgs other = args;
  other.out.data = nullptr;
  std::vector<std::uint8_t> ws(plan->workspace_bytes());
  EXPECT_REJECTED(run_attention(*plan, other, ws.data(), ws.size()), StatusCode::kInvalidArgument,
                  "out.data");
  ExpectUntouched();
}

}  // namespace
}  // namespace pagedattn
