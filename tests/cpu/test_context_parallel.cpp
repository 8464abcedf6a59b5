// Decode context parallelism (include/pagedattn/context_parallel.h) on the CPU: 2, 3 and 4
// ranks as threads of one process (make_thread_communicators), every sharding scheme, uneven
// lengths, sequences shorter than the world (empty shards), GQA, block sizes 1 and 16,
// fp32/fp16/bf16, against the single-device oracle (reference_attention over the whole
// sequences). Memory the math does not use is NaN, so a shard that reads a key it does not
// own, or a merge that uses an empty shard's state, fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pagedattn/context_parallel.h"
#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/fill.h"
#include "src/testing/harness.h"

namespace pagedattn {
namespace {

using dist::ShardScheme;

struct CpConfig {
  int world = 2;
  ShardScheme scheme = ShardScheme::kInterleaved;
  DType dtype = DType::kFloat16;
  int block_size = 16;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_size = 64;
  std::vector<int> seq_lens{1, 2, 17, 40, 100, 33};
  bool renumber = false;  // one compact cache per rank instead of one shared cache
  bool sinks = false;
  float softcap = 0.0f;
  std::uint64_t seed = 7;
};

std::string name(const CpConfig& c) {
  return std::string(dist::to_string(c.scheme)) + "_w" + std::to_string(c.world) + "_" +
         to_string(c.dtype) + "_bs" + std::to_string(c.block_size) +
         (c.renumber ? "_renumber" : "") + (c.sinks ? "_sinks" : "") +
         (c.softcap > 0 ? "_softcap" : "");
}

// A batch on the CPU: NHD cache with a random physical permutation, NaN in every unused slot.
struct Batch {
  CpConfig c;
  std::int64_t num_blocks = 0, width = 0;
  std::vector<unsigned char> key, value, query;
  std::vector<std::int32_t> block_table, seq_lens, qsl;
  std::vector<float> sinks;
  KVCache cache;

  explicit Batch(const CpConfig& cfg) : c(cfg) {
    const int bs = c.block_size;
    for (int len : c.seq_lens) width = std::max<std::int64_t>(width, (len + bs - 1) / bs);
    std::int64_t used = 0;
    for (int len : c.seq_lens) used += (len + bs - 1) / bs;
    num_blocks = used + 3;
    KVCacheSpec spec{KVLayout::kNHD, num_blocks, bs, c.num_kv_heads, c.head_size, c.dtype, 0};
    const std::int64_t elems = *kv_cache_elements(spec);
    key = testing::poisoned_bytes(c.dtype, elems);
    value = testing::poisoned_bytes(c.dtype, elems);
    cache = *make_kv_cache(spec, key.data(), value.data());
    testing::SplitMix64 rng(c.seed * testing::kGolden + 11);
    std::vector<std::int32_t> perm(static_cast<std::size_t>(num_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
    const std::int64_t s = static_cast<std::int64_t>(c.seq_lens.size());
    block_table.assign(static_cast<std::size_t>(s * width), -1);
    std::size_t next = 0;
    const std::int64_t token_elems = static_cast<std::int64_t>(c.num_kv_heads) * c.head_size;
    for (std::int64_t q = 0; q < s; ++q) {
      const int len = c.seq_lens[q];
      for (std::int64_t j = 0; j < (len + bs - 1) / bs; ++j)
        block_table[q * width + j] = perm[next++];
      for (int p = 0; p < len; ++p) {
        const std::int64_t slot = block_table[q * width + p / bs] * std::int64_t{bs} + p % bs;
        for (std::int64_t e = 0; e < token_elems; ++e) {
          numeric::store_from_float(key.data(), c.dtype, slot * token_elems + e,
                                    rng.uniform(-1.0f, 1.0f));
          numeric::store_from_float(value.data(), c.dtype, slot * token_elems + e,
                                    rng.uniform(-1.0f, 1.0f));
        }
      }
    }
    seq_lens.assign(c.seq_lens.begin(), c.seq_lens.end());
    qsl.resize(static_cast<std::size_t>(s + 1));
    std::iota(qsl.begin(), qsl.end(), 0);
    const std::int64_t qn = s * c.num_heads * c.head_size;
    query.resize(static_cast<std::size_t>(qn) * dtype_size(c.dtype));
    for (std::int64_t i = 0; i < qn; ++i)
      numeric::store_from_float(query.data(), c.dtype, i, rng.uniform(-1.0f, 1.0f));
    for (int h = 0; h < c.num_heads; ++h) sinks.push_back(rng.uniform(-1.0f, 2.0f));
  }

  std::int64_t num_seqs() const { return static_cast<std::int64_t>(c.seq_lens.size()); }

  AttentionParams params() {
    AttentionParams p;
    p.scale = testing::kDefaultScaleBoost * default_scale(c.head_size);
    p.softcap = c.softcap;
    if (c.sinks) p.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {c.num_heads});
    return p;
  }

  TensorView query_view() {
    return TensorView::contiguous(query.data(), c.dtype, {num_seqs(), c.num_heads, c.head_size});
  }
};

struct Outputs {
  std::vector<unsigned char> out;
  std::vector<float> lse;
};

// The oracle over the whole sequences.
Outputs oracle(Batch& b) {
  const std::int64_t s = b.num_seqs();
  Outputs o;
  o.out.resize(static_cast<std::size_t>(s * b.c.num_heads * b.c.head_size) * 4);
  o.lse.assign(static_cast<std::size_t>(s * b.c.num_heads), 0.0f);
  AttentionArgs a;
  a.query = b.query_view();
  a.cache = b.cache;
  a.block_table = TensorView::contiguous(b.block_table.data(), DType::kInt32, {s, b.width});
  a.seq_lens = TensorView::contiguous(b.seq_lens.data(), DType::kInt32, {s});
  a.query_start_loc = TensorView::contiguous(b.qsl.data(), DType::kInt32, {s + 1});
  a.out = TensorView::contiguous(o.out.data(), DType::kFloat32, {s, b.c.num_heads, b.c.head_size});
  a.lse = TensorView::contiguous(o.lse.data(), DType::kFloat32, {s, b.c.num_heads});
  a.params = b.params();
  const Status st = reference_attention(a);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return o;
}

// One rank's inputs: its shard of the metadata and, with renumber, its own compact cache.
struct RankInputs {
  dist::LocalShard shard;
  std::vector<unsigned char> key, value;
  KVCache cache;
  Outputs result;
};

RankInputs make_rank(Batch& b, int rank) {
  RankInputs r;
  const std::int64_t s = b.num_seqs();
  auto shard = dist::shard_block_table(
      TensorView::contiguous(b.block_table.data(), DType::kInt32, {s, b.width}),
      TensorView::contiguous(b.seq_lens.data(), DType::kInt32, {s}), b.c.block_size, b.c.scheme,
      b.c.world, rank, b.c.renumber);
  EXPECT_TRUE(shard.ok()) << shard.status().to_string();
  r.shard = *shard;
  r.cache = b.cache;
  if (b.c.renumber) {
    const std::int64_t n = std::max<std::int64_t>(1, r.shard.physical_blocks.size());
    KVCacheSpec spec{KVLayout::kNHD, n, b.c.block_size, b.c.num_kv_heads, b.c.head_size,
                     b.c.dtype, 0};
    const std::size_t block_bytes =
        static_cast<std::size_t>(kv_block_elements(spec)) * dtype_size(b.c.dtype);
    r.key = testing::poisoned_bytes(b.c.dtype, *kv_cache_elements(spec));
    r.value = testing::poisoned_bytes(b.c.dtype, *kv_cache_elements(spec));
    for (std::size_t k = 0; k < r.shard.physical_blocks.size(); ++k) {
      const std::size_t from = static_cast<std::size_t>(r.shard.physical_blocks[k]) * block_bytes;
      std::memcpy(r.key.data() + k * block_bytes, b.key.data() + from, block_bytes);
      std::memcpy(r.value.data() + k * block_bytes, b.value.data() + from, block_bytes);
    }
    r.cache = *make_kv_cache(spec, r.key.data(), r.value.data());
  }
  return r;
}

Status run_rank(Batch& b, RankInputs& r, dist::Communicator& comm) {
  const std::int64_t s = b.num_seqs();
  const std::int64_t n = s * b.c.num_heads * b.c.head_size;
  r.result.out = testing::poisoned_bytes(b.c.dtype, n);
  r.result.lse.assign(static_cast<std::size_t>(s * b.c.num_heads), NAN);
  AttentionArgs a;
  a.query = b.query_view();
  a.cache = r.cache;
  a.block_table = TensorView::contiguous(r.shard.block_table.data(), DType::kInt32,
                                         {s, r.shard.max_blocks_per_seq});
  a.seq_lens = TensorView::contiguous(r.shard.seq_lens.data(), DType::kInt32, {s});
  a.query_start_loc = TensorView::contiguous(b.qsl.data(), DType::kInt32, {s + 1});
  a.out = TensorView::contiguous(r.result.out.data(), b.c.dtype, {s, b.c.num_heads, b.c.head_size});
  a.lse = TensorView::contiguous(r.result.lse.data(), DType::kFloat32, {s, b.c.num_heads});
  a.params = b.params();
  return dist::context_parallel_decode(comm, a, HostMetadata::from_args(a));
}

// Runs every rank on its own thread; returns the per-rank inputs and results.
std::vector<RankInputs> run_world(Batch& b, std::vector<Status>* statuses) {
  auto comms = dist::make_thread_communicators(b.c.world);
  EXPECT_TRUE(comms.ok());
  std::vector<RankInputs> ranks;
  for (int r = 0; r < b.c.world; ++r) ranks.push_back(make_rank(b, r));
  statuses->assign(static_cast<std::size_t>(b.c.world), Status());
  std::vector<std::thread> threads;
  for (int r = 0; r < b.c.world; ++r)
    threads.emplace_back([&, r] { (*statuses)[r] = run_rank(b, ranks[r], *(*comms)[r]); });
  for (auto& t : threads) t.join();
  return ranks;
}

void expect_matches_oracle(const CpConfig& c) {
  SCOPED_TRACE(name(c));
  Batch b(c);
  const Outputs ref = oracle(b);
  std::vector<Status> statuses;
  std::vector<RankInputs> ranks = run_world(b, &statuses);
  const std::int64_t longest = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const testing::Tolerance tol = testing::tolerance_for(c.dtype, c.dtype, longest);
  const std::int64_t n = b.num_seqs() * c.num_heads * c.head_size;
  for (int r = 0; r < c.world; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r].to_string();
    const Outputs& got = ranks[r].result;
    // Every rank merges the same gathered states in the same order: identical bits.
    EXPECT_EQ(0, std::memcmp(got.out.data(), ranks[0].result.out.data(), got.out.size()))
        << "rank " << r << " differs from rank 0";
    for (std::int64_t i = 0; i < n; ++i) {
      const double want = reinterpret_cast<const float*>(ref.out.data())[i];
      const double have = numeric::load_as_float(got.out.data(), c.dtype, i);
      ASSERT_LE(std::fabs(have - want), tol.atol + tol.rtol * std::fabs(want))
          << "rank " << r << " out[" << i << "] = " << have << ", oracle " << want;
    }
    for (std::size_t i = 0; i < ref.lse.size(); ++i) {
      ASSERT_LE(std::fabs(got.lse[i] - ref.lse[i]), tol.atol + tol.rtol * std::fabs(ref.lse[i]))
          << "rank " << r << " lse[" << i << "] = " << got.lse[i] << ", oracle " << ref.lse[i];
    }
  }
}

struct GridParam {
  int world;
  ShardScheme scheme;
  DType dtype;
  int block_size;
};

class ContextParallelGrid : public ::testing::TestWithParam<GridParam> {};

TEST_P(ContextParallelGrid, MatchesTheSingleDeviceOracle) {
  const GridParam p = GetParam();
  CpConfig c;
  c.world = p.world;
  c.scheme = p.scheme;
  c.dtype = p.dtype;
  c.block_size = p.block_size;
  // Lengths: shorter than the world (in blocks and in tokens), one block exactly, uneven tails.
  c.seq_lens = p.block_size == 1 ? std::vector<int>{1, 2, 3, 5, 29, 64}
                                 : std::vector<int>{1, 16, 17, 40, 100, 257};
  c.renumber = (p.world % 2) == 1;  // odd worlds: one cache per rank; even: one shared cache
  expect_matches_oracle(c);
}

std::vector<GridParam> grid() {
  std::vector<GridParam> out;
  for (int w : {2, 3, 4})
    for (ShardScheme s : {ShardScheme::kInterleaved, ShardScheme::kContiguous})
      for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
        for (int bs : {1, 16}) out.push_back({w, s, d, bs});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cpu, ContextParallelGrid, ::testing::ValuesIn(grid()),
                         [](const ::testing::TestParamInfo<GridParam>& info) {
                           CpConfig c;
                           c.world = info.param.world;
                           c.scheme = info.param.scheme;
                           c.dtype = info.param.dtype;
                           c.block_size = info.param.block_size;
                           return name(c);
                         });

TEST(ContextParallel, SinksJoinTheMergeOnce) {
  for (ShardScheme s : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
    CpConfig c;
    c.world = 3;
    c.scheme = s;
    c.sinks = true;
    c.seq_lens = {1, 5, 33, 64};  // the 1-token sequence: two empty shards and the sink
    expect_matches_oracle(c);
  }
}

TEST(ContextParallel, SoftcapAndMultiQueryHeads) {
  CpConfig c;
  c.world = 4;
  c.softcap = 5.0f;
  c.num_heads = 4;
  c.num_kv_heads = 1;
  c.head_size = 128;
  c.dtype = DType::kBFloat16;
  expect_matches_oracle(c);
}

TEST(ContextParallel, OneRankHoldsEverything) {
  // World 4 and one short sequence per batch: ranks 1..3 (interleaved) or 0..2 (contiguous)
  // hold nothing at all, so their whole slot is the neutral state.
  for (ShardScheme s : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
    CpConfig c;
    c.world = 4;
    c.scheme = s;
    c.seq_lens = {9};
    c.renumber = true;
    expect_matches_oracle(c);
  }
}

TEST(ContextParallel, WorldOfOneEqualsPlainAttention) {
  CpConfig c;
  c.world = 1;
  c.dtype = DType::kFloat32;
  expect_matches_oracle(c);
}

TEST(ContextParallelShards, EveryPositionOnExactlyOneRank) {
  for (ShardScheme s : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
    for (int world : {1, 2, 3, 4, 7}) {
      for (int bs : {1, 4, 16}) {
        for (std::int64_t len : {0, 1, 3, 16, 17, 63, 64, 65, 1000}) {
          std::vector<int> seen(static_cast<std::size_t>(len), 0);
          std::int64_t total = 0;
          for (int r = 0; r < world; ++r) {
            const std::int64_t n = dist::shard_seq_len(s, world, r, bs, len);
            total += n;
            std::int64_t prev = -1;
            for (std::int64_t i = 0; i < n; ++i) {
              const std::int64_t p = dist::global_key_position(s, world, r, bs, len, i);
              ASSERT_GE(p, 0);
              ASSERT_LT(p, len);
              ASSERT_GT(p, prev) << "positions of a shard ascend";
              prev = p;
              ++seen[static_cast<std::size_t>(p)];
              if (s == ShardScheme::kInterleaved) {
                ASSERT_EQ((p / bs) % world, r) << "block j lives on rank j % world";
              }
            }
            if (s == ShardScheme::kContiguous && n > 0) {
              ASSERT_EQ(dist::global_key_position(s, world, r, bs, len, n - 1) -
                            dist::global_key_position(s, world, r, bs, len, 0),
                        n - 1)
                  << "a contiguous shard is one range";
            }
          }
          ASSERT_EQ(total, len);
          for (int v : seen) ASSERT_EQ(v, 1);
        }
      }
    }
  }
}

TEST(ContextParallelShards, LocalTableMatchesPositions) {
  std::vector<std::int32_t> table{10, 11, 12, 13, 14, 20, 21, -1, -1, -1};
  std::vector<std::int32_t> lens{70, 17};
  const TensorView bt = TensorView::contiguous(table.data(), DType::kInt32, {2, 5});
  const TensorView sl = TensorView::contiguous(lens.data(), DType::kInt32, {2});
  auto r1 = dist::shard_block_table(bt, sl, 16, ShardScheme::kInterleaved, 2, 1);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->max_blocks_per_seq, 2);
  EXPECT_EQ(r1->block_table, (std::vector<std::int32_t>{11, 13, 21, 0}));
  EXPECT_EQ(r1->seq_lens, (std::vector<std::int32_t>{32, 1}));
  auto r0 = dist::shard_block_table(bt, sl, 16, ShardScheme::kInterleaved, 2, 0);
  ASSERT_TRUE(r0.ok());
  EXPECT_EQ(r0->block_table, (std::vector<std::int32_t>{10, 12, 14, 20, 0, 0}));
  EXPECT_EQ(r0->seq_lens, (std::vector<std::int32_t>{38, 16}));
  auto c1 = dist::shard_block_table(bt, sl, 16, ShardScheme::kContiguous, 2, 1, true);
  ASSERT_TRUE(c1.ok());
  // Sequence 0 has 5 blocks: rank 1 holds [2, 5); sequence 1's 2 blocks: [1, 2).
  EXPECT_EQ(c1->physical_blocks, (std::vector<std::int32_t>{12, 13, 14, 21}));
  EXPECT_EQ(c1->block_table, (std::vector<std::int32_t>{0, 1, 2, 3, 0, 0}));
  EXPECT_EQ(c1->seq_lens, (std::vector<std::int32_t>{38, 1}));
  EXPECT_FALSE(dist::shard_block_table(bt, sl, 16, ShardScheme::kContiguous, 2, 2).ok());
  lens[1] = 97;  // 7 blocks > 5 columns
  auto bad = dist::shard_block_table(bt, sl, 16, ShardScheme::kContiguous, 2, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("seq_lens[1] = 97"), std::string::npos)
      << bad.status().message();
  EXPECT_EQ(dist::parse_shard_scheme("interleaved").value(), ShardScheme::kInterleaved);
  EXPECT_FALSE(dist::parse_shard_scheme("striped").ok());
}

// Position-dependent features are refused by name, before any collective.
TEST(ContextParallel, RejectsWindowAlibiAndPrefill) {
  CpConfig c;
  c.world = 1;
  Batch b(c);
  auto comms = dist::make_thread_communicators(1);
  ASSERT_TRUE(comms.ok());
  RankInputs r = make_rank(b, 0);
  const std::int64_t s = b.num_seqs();
  std::vector<unsigned char> out(static_cast<std::size_t>(s * c.num_heads * c.head_size) * 2);
  std::vector<float> slopes(static_cast<std::size_t>(c.num_heads), 0.5f);
  AttentionArgs a;
  a.query = b.query_view();
  a.cache = r.cache;
  a.block_table = TensorView::contiguous(r.shard.block_table.data(), DType::kInt32,
                                         {s, r.shard.max_blocks_per_seq});
  a.seq_lens = TensorView::contiguous(r.shard.seq_lens.data(), DType::kInt32, {s});
  a.query_start_loc = TensorView::contiguous(b.qsl.data(), DType::kInt32, {s + 1});
  a.out = TensorView::contiguous(out.data(), c.dtype, {s, c.num_heads, c.head_size});
  a.params = b.params();
  const auto expect_unsupported = [&](const AttentionArgs& args, const char* word) {
    auto plan = dist::plan_context_parallel_decode(*(*comms)[0], args, HostMetadata::from_args(args));
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), StatusCode::kUnsupported);
    EXPECT_NE(plan.status().message().find(word), std::string::npos) << plan.status().message();
  };
  AttentionArgs w = a;
  w.params.sliding_window = 8;
  expect_unsupported(w, "sliding_window");
  AttentionArgs al = a;
  al.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {c.num_heads});
  expect_unsupported(al, "alibi_slopes");
  std::vector<std::int32_t> prefill_qsl(b.qsl);
  prefill_qsl[1] = 0;  // sequence 0 skipped, sequence 1 two rows
  AttentionArgs pf = a;
  pf.query_start_loc = TensorView::contiguous(prefill_qsl.data(), DType::kInt32, {s + 1});
  expect_unsupported(pf, "one query token per sequence");
  // An empty shard whose entry 0 is no block: named, kInvalidArgument.
  std::vector<std::int32_t> lens(r.shard.seq_lens);
  std::vector<std::int32_t> table(r.shard.block_table);
  lens[0] = 0;
  table[0] = -1;
  AttentionArgs e = a;
  e.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {s});
  e.block_table = TensorView::contiguous(table.data(), DType::kInt32, {s, r.shard.max_blocks_per_seq});
  auto plan = dist::plan_context_parallel_decode(*(*comms)[0], e, HostMetadata::from_args(e));
  ASSERT_FALSE(plan.ok());
  EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(plan.status().message().find("block_table[0][0] = -1"), std::string::npos)
      << plan.status().message();
}

TEST(ContextParallel, ThreadAllGatherChecksSizes) {
  auto comms = dist::make_thread_communicators(2);
  ASSERT_TRUE(comms.ok());
  std::vector<int> a{1, 2}, b{3, 4, 5};
  std::vector<int> ra(6, 0), rb(6, 0);
  Status sa, sb;
  std::thread t([&] { sa = (*comms)[0]->all_gather(a.data(), ra.data(), 8); });
  sb = (*comms)[1]->all_gather(b.data(), rb.data(), 12);
  t.join();
  EXPECT_EQ(sa.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sb.code(), StatusCode::kInvalidArgument);
  // Matching sizes, in place on rank 1: everyone ends with [1, 2, 3, 4].
  std::vector<int> ib{0, 0, 3, 4};
  std::thread t2([&] { sa = (*comms)[0]->all_gather(a.data(), ra.data(), 8); });
  sb = (*comms)[1]->all_gather(ib.data() + 2, ib.data(), 8);
  t2.join();
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_EQ(std::vector<int>(ra.begin(), ra.begin() + 4), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(ib, (std::vector<int>{1, 2, 3, 4}));
  EXPECT_FALSE(dist::make_thread_communicators(0).ok());
}

TEST(ContextParallel, ThreadCommunicatorsOnAMissingCudaDeviceAreRefused) {
  // No machine has 1000 GPUs; a CPU-only build has none: refused before any rank exists.
  auto comms = dist::make_thread_communicators(2, Device::cuda(1000));
  ASSERT_FALSE(comms.ok());
  EXPECT_EQ(comms.status().code(), StatusCode::kDeviceUnavailable);
  EXPECT_NE(comms.status().message().find("cuda:1000"), std::string::npos)
      << comms.status().to_string();
  auto cpu = dist::make_thread_communicators(2, Device::cpu());
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ((*cpu)[0]->device(), Device::cpu());
}

}  // namespace
}  // namespace pagedattn

namespace pagedattn {
namespace {

// plan once, run twice on one workspace: the same bits (no state carried between runs), and a
// communicator of another rank than the plan's is refused by name before any collective.
TEST(ContextParallel, PlanOnceRunTwiceAndRankCheck) {
  CpConfig c;
  c.world = 2;
  c.seq_lens = {3, 50, 19};
  Batch b(c);
  auto comms = dist::make_thread_communicators(2);
  ASSERT_TRUE(comms.ok());
  std::vector<RankInputs> ranks{make_rank(b, 0), make_rank(b, 1)};
  const std::int64_t s = b.num_seqs();
  std::vector<std::vector<unsigned char>> first(2), second(2);
  std::vector<Status> st(2);
  auto body = [&](int r) {
    RankInputs& in = ranks[r];
    std::vector<unsigned char> out(static_cast<std::size_t>(s * c.num_heads * c.head_size) * 2);
    AttentionArgs a;
    a.query = b.query_view();
    a.cache = in.cache;
    a.block_table = TensorView::contiguous(in.shard.block_table.data(), DType::kInt32,
                                           {s, in.shard.max_blocks_per_seq});
    a.seq_lens = TensorView::contiguous(in.shard.seq_lens.data(), DType::kInt32, {s});
    a.query_start_loc = TensorView::contiguous(b.qsl.data(), DType::kInt32, {s + 1});
    a.out = TensorView::contiguous(out.data(), c.dtype, {s, c.num_heads, c.head_size});
    a.params = b.params();
    auto plan = dist::plan_context_parallel_decode(*(*comms)[r], a, HostMetadata::from_args(a));
    if (!plan.ok()) { st[r] = plan.status(); return; }
    // Another rank's communicator: refused before the all-gather.
    const Status wrong = dist::run_context_parallel_decode(*plan, *(*comms)[1 - r], a, nullptr, 0);
    if (wrong.code() != StatusCode::kInvalidArgument ||
        wrong.message().find("plan was made for rank") == std::string::npos) {
      st[r] = Status(StatusCode::kInternal, "wrong communicator not refused: " + wrong.to_string());
      return;
    }
    std::vector<std::max_align_t> ws(plan->workspace_bytes / sizeof(std::max_align_t) + 1);
    const std::size_t bytes = ws.size() * sizeof(std::max_align_t);
    st[r] = dist::run_context_parallel_decode(*plan, *(*comms)[r], a, ws.data(), bytes);
    first[r] = out;
    std::fill(out.begin(), out.end(), 0xFF);
    if (st[r].ok()) st[r] = dist::run_context_parallel_decode(*plan, *(*comms)[r], a, ws.data(), bytes);
    second[r] = out;
  };
  std::thread t(body, 1);
  body(0);
  t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(first[r], second[r]) << "rank " << r;
    EXPECT_EQ(first[r], first[0]);
  }
}

}  // namespace
}  // namespace pagedattn
