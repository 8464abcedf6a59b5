// Decode context parallelism over NCCL (include/pagedattn/context_parallel.h): one thread per
// GPU, each rank holding a compact cache of its shard's blocks on its own device, against the
// CPU oracle over the whole sequences; all ranks must return the same bits. Skips with fewer
// than two GPUs or without NCCL. NCCL_NVLS_ENABLE=0 is set before any communicator exists
// (NVLink multicast stays off on shared hosts).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "pagedattn/context_parallel.h"
#include "src/testing/fill.h"
#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

using dist::ShardScheme;

int gpu_count() { return have_gpu() ? cuda::testsupport::device_count() : 0; }

#define PA_SKIP_WITHOUT_NCCL_GPUS(n)                                                         \
  do {                                                                                       \
    setenv("NCCL_NVLS_ENABLE", "0", 1);                                                      \
    if (gpu_count() < (n)) GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << gpu_count(); \
    if (!dist::make_nccl_unique_id().ok()) GTEST_SKIP() << "this build has no NCCL";          \
  } while (0)

struct CpCase {
  int world = 2;
  ShardScheme scheme = ShardScheme::kInterleaved;
  DType dtype = DType::kBFloat16;
  int block_size = 16;
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  std::vector<int> seq_lens{1, 16, 17, 1000, 4097, 333};
  bool sinks = false;
  std::uint64_t seed = 3;
};

struct Host {
  std::int64_t width = 0, num_blocks = 0;
  std::vector<unsigned char> key, value, query;
  std::vector<std::int32_t> block_table, seq_lens, qsl;
  std::vector<float> sinks;
  KVCache cache;
};

Host make_host(const CpCase& c) {
  Host h;
  const int bs = c.block_size;
  std::int64_t used = 0;
  for (int len : c.seq_lens) {
    h.width = std::max<std::int64_t>(h.width, (len + bs - 1) / bs);
    used += (len + bs - 1) / bs;
  }
  h.num_blocks = used + 2;
  KVCacheSpec spec{KVLayout::kNHD, h.num_blocks, bs, c.num_kv_heads, c.head_size, c.dtype, 0};
  const std::int64_t elems = *kv_cache_elements(spec);
  h.key = testing::poisoned_bytes(c.dtype, elems);
  h.value = testing::poisoned_bytes(c.dtype, elems);
  h.cache = *make_kv_cache(spec, h.key.data(), h.value.data());
  Rng rng(c.seed);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(h.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[rng.below(i)]);
  const std::int64_t s = static_cast<std::int64_t>(c.seq_lens.size());
  h.block_table.assign(static_cast<std::size_t>(s * h.width), -1);
  const std::int64_t tok = static_cast<std::int64_t>(c.num_kv_heads) * c.head_size;
  std::size_t next = 0;
  for (std::int64_t q = 0; q < s; ++q) {
    for (std::int64_t j = 0; j < (c.seq_lens[q] + bs - 1) / bs; ++j)
      h.block_table[q * h.width + j] = perm[next++];
    for (int p = 0; p < c.seq_lens[q]; ++p) {
      const std::int64_t slot = h.block_table[q * h.width + p / bs] * std::int64_t{bs} + p % bs;
      for (std::int64_t e = 0; e < tok; ++e) {
        numeric::store_from_float(h.key.data(), c.dtype, slot * tok + e, rng.uniform(-1, 1));
        numeric::store_from_float(h.value.data(), c.dtype, slot * tok + e, rng.uniform(-1, 1));
      }
    }
  }
  h.seq_lens.assign(c.seq_lens.begin(), c.seq_lens.end());
  h.qsl.resize(static_cast<std::size_t>(s + 1));
  std::iota(h.qsl.begin(), h.qsl.end(), 0);
  const std::int64_t qn = s * c.num_heads * c.head_size;
  h.query.resize(static_cast<std::size_t>(qn) * dtype_size(c.dtype));
  for (std::int64_t i = 0; i < qn; ++i)
    numeric::store_from_float(h.query.data(), c.dtype, i, rng.uniform(-1, 1));
  for (int i = 0; i < c.num_heads; ++i) h.sinks.push_back(rng.uniform(-1, 2));
  return h;
}

float case_scale(const CpCase& c) { return 6.0f * default_scale(c.head_size); }

// The rank's whole step on its GPU; leaves its output and lse in `out` / `lse` (host).
Status run_rank(const CpCase& c, const Host& h, const dist::NcclId& id, int rank,
                std::vector<unsigned char>* out, std::vector<float>* lse) {
  const std::int64_t s = static_cast<std::int64_t>(c.seq_lens.size());
  auto shard = dist::shard_block_table(
      TensorView::contiguous(const_cast<std::int32_t*>(h.block_table.data()), DType::kInt32,
                             {s, h.width}),
      TensorView::contiguous(const_cast<std::int32_t*>(h.seq_lens.data()), DType::kInt32, {s}),
      c.block_size, c.scheme, c.world, rank, /*renumber=*/true);
  if (!shard.ok()) return shard.status();
  auto comm = dist::make_nccl_communicator(id, c.world, rank, rank);
  if (!comm.ok()) return comm.status();
  const Device dev = Device::cuda(rank);
  // The rank's compact cache: its blocks only, NaN elsewhere.
  const std::int64_t nb = std::max<std::int64_t>(1, shard->physical_blocks.size());
  KVCacheSpec spec{KVLayout::kNHD, nb, c.block_size, c.num_kv_heads, c.head_size, c.dtype, 0};
  const std::size_t block_bytes =
      static_cast<std::size_t>(kv_block_elements(spec)) * dtype_size(c.dtype);
  std::vector<unsigned char> k = testing::poisoned_bytes(c.dtype, *kv_cache_elements(spec));
  std::vector<unsigned char> v = testing::poisoned_bytes(c.dtype, *kv_cache_elements(spec));
  for (std::size_t i = 0; i < shard->physical_blocks.size(); ++i) {
    const std::size_t from = static_cast<std::size_t>(shard->physical_blocks[i]) * block_bytes;
    std::memcpy(k.data() + i * block_bytes, h.key.data() + from, block_bytes);
    std::memcpy(v.data() + i * block_bytes, h.value.data() + from, block_bytes);
  }
  DeviceMem dk, dv, dq, dbt, dsl, dqsl, dout, dlse, dsinks;
  const std::size_t out_bytes = h.query.size();
  PAGEDATTN_RETURN_IF_ERROR(dk.alloc(k.size(), rank));
  PAGEDATTN_RETURN_IF_ERROR(dv.alloc(v.size(), rank));
  PAGEDATTN_RETURN_IF_ERROR(dq.alloc(out_bytes, rank));
  PAGEDATTN_RETURN_IF_ERROR(dbt.alloc(shard->block_table.size() * 4, rank));
  PAGEDATTN_RETURN_IF_ERROR(dsl.alloc(shard->seq_lens.size() * 4, rank));
  PAGEDATTN_RETURN_IF_ERROR(dqsl.alloc(h.qsl.size() * 4, rank));
  PAGEDATTN_RETURN_IF_ERROR(dout.alloc(out_bytes, rank));
  PAGEDATTN_RETURN_IF_ERROR(dlse.alloc(static_cast<std::size_t>(s * c.num_heads) * 4, rank));
  PAGEDATTN_RETURN_IF_ERROR(dsinks.alloc(h.sinks.size() * 4, rank));
  PAGEDATTN_RETURN_IF_ERROR(dk.upload(k));
  PAGEDATTN_RETURN_IF_ERROR(dv.upload(v));
  PAGEDATTN_RETURN_IF_ERROR(dq.upload(h.query));
  PAGEDATTN_RETURN_IF_ERROR(dbt.upload(shard->block_table));
  PAGEDATTN_RETURN_IF_ERROR(dsl.upload(shard->seq_lens));
  PAGEDATTN_RETURN_IF_ERROR(dqsl.upload(h.qsl));
  PAGEDATTN_RETURN_IF_ERROR(dsinks.upload(h.sinks));
  std::vector<unsigned char> poison = testing::poisoned_bytes(c.dtype, s * c.num_heads * c.head_size);
  PAGEDATTN_RETURN_IF_ERROR(dout.upload(poison));
  auto cache = make_kv_cache(spec, dk.get(), dv.get(), dev);
  if (!cache.ok()) return cache.status();
  AttentionArgs a;
  a.query = TensorView::contiguous(dq.get(), c.dtype, {s, c.num_heads, c.head_size}, dev);
  a.cache = *cache;
  a.block_table = TensorView::contiguous(dbt.get(), DType::kInt32, {s, shard->max_blocks_per_seq}, dev);
  a.seq_lens = TensorView::contiguous(dsl.get(), DType::kInt32, {s}, dev);
  a.query_start_loc = TensorView::contiguous(dqsl.get(), DType::kInt32, {s + 1}, dev);
  a.out = TensorView::contiguous(dout.get(), c.dtype, {s, c.num_heads, c.head_size}, dev);
  a.lse = TensorView::contiguous(dlse.get(), DType::kFloat32, {s, c.num_heads}, dev);
  a.params.scale = case_scale(c);
  if (c.sinks) a.params.sinks = TensorView::contiguous(dsinks.get(), DType::kFloat32, {c.num_heads}, dev);
  HostMetadata host;
  host.block_table = TensorView::contiguous(shard->block_table.data(), DType::kInt32,
                                            {s, shard->max_blocks_per_seq});
  host.seq_lens = TensorView::contiguous(shard->seq_lens.data(), DType::kInt32, {s});
  host.query_start_loc = TensorView::contiguous(const_cast<std::int32_t*>(h.qsl.data()),
                                                DType::kInt32, {s + 1});
  PAGEDATTN_RETURN_IF_ERROR(dist::context_parallel_decode(**comm, a, host));
  out->resize(out_bytes);
  lse->resize(static_cast<std::size_t>(s * c.num_heads));
  PAGEDATTN_RETURN_IF_ERROR(dout.download(out->data(), out_bytes));
  return dlse.download(lse->data(), lse->size() * 4);
}

void expect_matches_oracle(const CpCase& c) {
  const Host h = make_host(c);
  const std::int64_t s = static_cast<std::int64_t>(c.seq_lens.size());
  std::vector<float> ref(static_cast<std::size_t>(s * c.num_heads * c.head_size));
  std::vector<float> ref_lse(static_cast<std::size_t>(s * c.num_heads));
  AttentionArgs a;
  a.query = TensorView::contiguous(const_cast<unsigned char*>(h.query.data()), c.dtype,
                                   {s, c.num_heads, c.head_size});
  a.cache = h.cache;
  a.block_table = TensorView::contiguous(const_cast<std::int32_t*>(h.block_table.data()),
                                         DType::kInt32, {s, h.width});
  a.seq_lens = TensorView::contiguous(const_cast<std::int32_t*>(h.seq_lens.data()), DType::kInt32, {s});
  a.query_start_loc = TensorView::contiguous(const_cast<std::int32_t*>(h.qsl.data()), DType::kInt32, {s + 1});
  a.out = TensorView::contiguous(ref.data(), DType::kFloat32, {s, c.num_heads, c.head_size});
  a.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {s, c.num_heads});
  a.params.scale = case_scale(c);
  if (c.sinks)
    a.params.sinks = TensorView::contiguous(const_cast<float*>(h.sinks.data()), DType::kFloat32, {c.num_heads});
  PA_ASSERT_OK(reference_attention(a));

  auto id = dist::make_nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  std::vector<std::vector<unsigned char>> outs(c.world);
  std::vector<std::vector<float>> lses(c.world);
  std::vector<Status> st(c.world);
  std::vector<std::thread> threads;
  for (int r = 0; r < c.world; ++r)
    threads.emplace_back([&, r] { st[r] = run_rank(c, h, *id, r, &outs[r], &lses[r]); });
  for (auto& t : threads) t.join();
  const std::int64_t longest = *std::max_element(c.seq_lens.begin(), c.seq_lens.end());
  const testing::Tolerance tol = testing::tolerance_for(c.dtype, c.dtype, longest);
  for (int r = 0; r < c.world; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(outs[r], outs[0]) << "rank " << r << "'s output differs from rank 0's";
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double have = numeric::load_as_float(outs[r].data(), c.dtype, static_cast<std::int64_t>(i));
      ASSERT_LE(std::fabs(have - ref[i]), tol.atol + tol.rtol * std::fabs(ref[i]))
          << "rank " << r << " out[" << i << "] = " << have << ", oracle " << ref[i];
    }
    for (std::size_t i = 0; i < ref_lse.size(); ++i)
      ASSERT_LE(std::fabs(lses[r][i] - ref_lse[i]), tol.atol + tol.rtol * std::fabs(ref_lse[i]))
          << "rank " << r << " lse[" << i << "]";
  }
}

struct Param {
  int world;
  ShardScheme scheme;
  DType dtype;
  int block_size;
};

class CudaContextParallel : public ::testing::TestWithParam<Param> {};

TEST_P(CudaContextParallel, NcclMatchesTheOracle) {
  const Param p = GetParam();
  PA_SKIP_WITHOUT_NCCL_GPUS(p.world);
  CpCase c;
  c.world = p.world;
  c.scheme = p.scheme;
  c.dtype = p.dtype;
  c.block_size = p.block_size;
  if (p.block_size == 1) c.seq_lens = {1, 2, 3, 300};
  expect_matches_oracle(c);
}

std::vector<Param> params() {
  std::vector<Param> v;
  for (int w : {2, 4})
    for (ShardScheme s : {ShardScheme::kInterleaved, ShardScheme::kContiguous})
      for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16})
        for (int bs : {1, 16}) v.push_back({w, s, d, bs});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Nccl, CudaContextParallel, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(dist::to_string(info.param.scheme)) + "_w" +
                                  std::to_string(info.param.world) + "_" +
                                  to_string(info.param.dtype) + "_bs" +
                                  std::to_string(info.param.block_size);
                         });

TEST(CudaContextParallelNccl, SinksAndAOneBlockSequence) {
  PA_SKIP_WITHOUT_NCCL_GPUS(2);
  CpCase c;
  c.sinks = true;
  c.seq_lens = {9, 70000};  // 9 tokens: one block, so rank 1 holds nothing of it
  expect_matches_oracle(c);
}

TEST(CudaContextParallelNccl, AllGatherMovesEveryRanksBytes) {
  PA_SKIP_WITHOUT_NCCL_GPUS(2);
  auto id = dist::make_nccl_unique_id();
  ASSERT_TRUE(id.ok());
  std::vector<Status> st(2);
  std::vector<std::vector<int>> got(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto comm = dist::make_nccl_communicator(*id, 2, r, r);
      if (!comm.ok()) { st[r] = comm.status(); return; }
      DeviceMem buf;
      st[r] = buf.alloc(8 * sizeof(int), r);
      if (!st[r].ok()) return;
      std::vector<int> mine{10 * r, 10 * r + 1, 10 * r + 2, 10 * r + 3};
      st[r] = buf.upload(mine.data(), 16, 16 * static_cast<std::size_t>(r));
      if (!st[r].ok()) return;
      // In place: this rank's part already sits at its offset.
      st[r] = (*comm)->all_gather(buf.at(16 * static_cast<std::size_t>(r)), buf.get(), 16);
      if (!st[r].ok()) return;
      st[r] = cuda::device_synchronize(r);
      got[r].resize(8);
      if (st[r].ok()) st[r] = buf.download(got[r].data(), 32);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(st[r].ok()) << st[r].to_string();
    EXPECT_EQ(got[r], (std::vector<int>{0, 1, 2, 3, 10, 11, 12, 13}));
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
