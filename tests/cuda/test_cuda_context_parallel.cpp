// Decode context parallelism on CUDA (include/pagedattn/context_parallel.h), against the CPU
// oracle over the whole sequences; all ranks must return the same bits.
//  - Nccl*: one thread per GPU over NCCL, each rank holding a compact cache of its shard's
//    blocks on its own device. Skips with fewer GPUs than ranks or without NCCL.
//  - CpOneGpu*: what one GPU can check: 2 and 4 ranks as threads on the SAME device, each
//    with its own stream (make_thread_communicators(W, cuda:0)), so the CUDA steps (prepare,
//    the local attention with LSE, the device-to-device exchange, the merge kernel) run; and
//    an NCCL group of one rank, so that NCCL's init and all-gather run once.
// NCCL_NVLS_ENABLE=0 is set before any communicator exists (NVLink multicast stays off on
// shared hosts).
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
  // How the ranks run: NCCL with one GPU per rank, or threads sharing GPU 0.
  bool one_gpu_threads = false;
  // Without it every rank's table names the global blocks of a full copy of the cache.
  bool renumber = true;
  // plan_context_parallel_decode + run_context_parallel_decode with the test's workspace on
  // the rank's stream, run twice (a plan is reusable), instead of the convenience call.
  bool direct = false;
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

// The rank's whole step over `comm` on CUDA device `device` and `stream`; leaves its output
// and lse in `out` / `lse` (host).
Status run_rank(const CpCase& c, const Host& h, dist::Communicator& comm, int device,
                Stream stream, std::vector<unsigned char>* out, std::vector<float>* lse) {
  const int rank = comm.rank();
  const std::int64_t s = static_cast<std::int64_t>(c.seq_lens.size());
  auto shard = dist::shard_block_table(
      TensorView::contiguous(const_cast<std::int32_t*>(h.block_table.data()), DType::kInt32,
                             {s, h.width}),
      TensorView::contiguous(const_cast<std::int32_t*>(h.seq_lens.data()), DType::kInt32, {s}),
      c.block_size, c.scheme, c.world, rank, c.renumber);
  if (!shard.ok()) return shard.status();
  const Device dev = Device::cuda(device);
  // The rank's compact cache (its blocks only, NaN elsewhere), or the whole cache.
  const std::int64_t nb = c.renumber ? std::max<std::int64_t>(1, shard->physical_blocks.size())
                                     : h.num_blocks;
  KVCacheSpec spec{KVLayout::kNHD, nb, c.block_size, c.num_kv_heads, c.head_size, c.dtype, 0};
  const std::size_t block_bytes =
      static_cast<std::size_t>(kv_block_elements(spec)) * dtype_size(c.dtype);
  std::vector<unsigned char> k = c.renumber
                                     ? testing::poisoned_bytes(c.dtype, *kv_cache_elements(spec))
                                     : h.key;
  std::vector<unsigned char> v = c.renumber
                                     ? testing::poisoned_bytes(c.dtype, *kv_cache_elements(spec))
                                     : h.value;
  for (std::size_t i = 0; c.renumber && i < shard->physical_blocks.size(); ++i) {
    const std::size_t from = static_cast<std::size_t>(shard->physical_blocks[i]) * block_bytes;
    std::memcpy(k.data() + i * block_bytes, h.key.data() + from, block_bytes);
    std::memcpy(v.data() + i * block_bytes, h.value.data() + from, block_bytes);
  }
  DeviceMem dk, dv, dq, dbt, dsl, dqsl, dout, dlse, dsinks;
  const std::size_t out_bytes = h.query.size();
  PAGEDATTN_RETURN_IF_ERROR(dk.alloc(k.size(), device));
  PAGEDATTN_RETURN_IF_ERROR(dv.alloc(v.size(), device));
  PAGEDATTN_RETURN_IF_ERROR(dq.alloc(out_bytes, device));
  PAGEDATTN_RETURN_IF_ERROR(dbt.alloc(shard->block_table.size() * 4, device));
  PAGEDATTN_RETURN_IF_ERROR(dsl.alloc(shard->seq_lens.size() * 4, device));
  PAGEDATTN_RETURN_IF_ERROR(dqsl.alloc(h.qsl.size() * 4, device));
  PAGEDATTN_RETURN_IF_ERROR(dout.alloc(out_bytes, device));
  PAGEDATTN_RETURN_IF_ERROR(dlse.alloc(static_cast<std::size_t>(s * c.num_heads) * 4, device));
  PAGEDATTN_RETURN_IF_ERROR(dsinks.alloc(h.sinks.size() * 4, device));
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
  // The uploads ran on the legacy default stream; the rank's stream is non-blocking.
  PAGEDATTN_RETURN_IF_ERROR(cuda::device_synchronize(device));
  if (!c.direct) {
    PAGEDATTN_RETURN_IF_ERROR(dist::context_parallel_decode(comm, a, host, stream));
  } else {
    auto plan = dist::plan_context_parallel_decode(comm, a, host);
    if (!plan.ok()) return plan.status();
    DeviceMem ws;
    if (plan->workspace_bytes > 0) PAGEDATTN_RETURN_IF_ERROR(ws.alloc(plan->workspace_bytes, device));
    for (int i = 0; i < 2; ++i) {
      PAGEDATTN_RETURN_IF_ERROR(dout.upload(poison));
      PAGEDATTN_RETURN_IF_ERROR(cuda::device_synchronize(device));
      PAGEDATTN_RETURN_IF_ERROR(dist::run_context_parallel_decode(*plan, comm, a, ws.get(),
                                                                  ws.size(), stream));
      PAGEDATTN_RETURN_IF_ERROR(cuda::testsupport::stream_synchronize(stream));
    }
  }
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

  std::vector<std::vector<unsigned char>> outs(c.world);
  std::vector<std::vector<float>> lses(c.world);
  std::vector<Status> st(c.world);
  std::vector<std::thread> threads;
  if (c.one_gpu_threads) {
    auto comms = dist::make_thread_communicators(c.world, Device::cuda(0));
    ASSERT_TRUE(comms.ok()) << comms.status().to_string();
    std::vector<void*> streams;
    for (int r = 0; r < c.world; ++r) {
      auto stream = cuda::testsupport::stream_create();
      ASSERT_TRUE(stream.ok()) << stream.status().to_string();
      streams.push_back(*stream);
    }
    for (int r = 0; r < c.world; ++r)
      threads.emplace_back([&, r] {
        st[r] = run_rank(c, h, *(*comms)[r], 0, streams[r], &outs[r], &lses[r]);
      });
    for (auto& t : threads) t.join();
    for (void* stream : streams) cuda::testsupport::stream_destroy(stream);
  } else {
    auto id = dist::make_nccl_unique_id();
    ASSERT_TRUE(id.ok()) << id.status().to_string();
    for (int r = 0; r < c.world; ++r)
      threads.emplace_back([&, r] {
        // ncclCommInitRank blocks until every rank has joined: one thread each.
        auto comm = dist::make_nccl_communicator(*id, c.world, r, r);
        st[r] = comm.ok() ? run_rank(c, h, **comm, r, nullptr, &outs[r], &lses[r]) : comm.status();
      });
    for (auto& t : threads) t.join();
  }
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

// ------------------------------------------------------------------------ one GPU

class CudaCpOneGpu : public ::testing::TestWithParam<Param> {};

TEST_P(CudaCpOneGpu, ThreadRanksOnOneDeviceMatchTheOracle) {
  PA_SKIP_WITHOUT_GPU();
  const Param p = GetParam();
  CpCase c;
  c.one_gpu_threads = true;
  c.world = p.world;
  c.scheme = p.scheme;
  c.dtype = p.dtype;
  c.block_size = p.block_size;
  // 1 and 16 tokens: one block, so every rank but one holds nothing of them (empty shards);
  // the others leave uneven shards.
  if (p.block_size == 1) c.seq_lens = {1, 2, 3, 5, 300};
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(Threads, CudaCpOneGpu, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(dist::to_string(info.param.scheme)) + "_w" +
                                  std::to_string(info.param.world) + "_" +
                                  to_string(info.param.dtype) + "_bs" +
                                  std::to_string(info.param.block_size);
                         });

TEST(CudaCpOneGpuCases, SinksOverTwoAndFourRanks) {
  PA_SKIP_WITHOUT_GPU();
  for (int w : {2, 4}) {
    for (ShardScheme scheme : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
      SCOPED_TRACE(std::string(dist::to_string(scheme)) + " w" + std::to_string(w));
      CpCase c;
      c.one_gpu_threads = true;
      c.world = w;
      c.scheme = scheme;
      c.sinks = true;
      c.seq_lens = {9, 40000, 33};  // 9 tokens: one block, the other ranks hold nothing of it
      expect_matches_oracle(c);
    }
  }
}

TEST(CudaCpOneGpuCases, RanksWithNoKeysAtAll) {
  PA_SKIP_WITHOUT_GPU();
  // Two one-block sequences over 4 ranks: interleaved puts both on rank 0, so ranks 1-3 have
  // an empty shard for every sequence (and a one-block NaN cache); contiguous puts them on
  // rank 3.
  for (ShardScheme scheme : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
    for (bool sinks : {false, true}) {
      SCOPED_TRACE(std::string(dist::to_string(scheme)) + (sinks ? " sinks" : ""));
      CpCase c;
      c.one_gpu_threads = true;
      c.world = 4;
      c.scheme = scheme;
      c.sinks = sinks;
      c.seq_lens = {5, 16};
      expect_matches_oracle(c);
    }
  }
}

TEST(CudaCpOneGpuCases, SharedCacheAndAReusedPlanOnEachRanksStream) {
  PA_SKIP_WITHOUT_GPU();
  for (int w : {2, 4}) {
    for (ShardScheme scheme : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
      SCOPED_TRACE(std::string(dist::to_string(scheme)) + " w" + std::to_string(w));
      CpCase c;
      c.one_gpu_threads = true;
      c.world = w;
      c.scheme = scheme;
      c.dtype = DType::kFloat16;
      c.renumber = false;  // global block ids into a full copy of the cache
      c.direct = true;
      expect_matches_oracle(c);
    }
  }
}

TEST(CudaCpOneGpuCases, ThreadAllGatherOnTheDeviceInPlaceAndNot) {
  PA_SKIP_WITHOUT_GPU();
  constexpr int kWorld = 3;
  auto comms = dist::make_thread_communicators(kWorld, Device::cuda(0));
  ASSERT_TRUE(comms.ok()) << comms.status().to_string();
  EXPECT_EQ((*comms)[1]->device(), Device::cuda(0));
  std::vector<Status> st(kWorld);
  std::vector<std::vector<int>> in_place(kWorld), copied(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      auto stream = cuda::testsupport::stream_create();
      if (!stream.ok()) { st[r] = stream.status(); return; }
      DeviceMem buf, send, recv;
      const std::vector<int> mine{10 * r, 10 * r + 1};
      const std::vector<int> poison(2 * kWorld, -1);
      st[r] = buf.alloc(8 * kWorld, 0);
      if (st[r].ok()) st[r] = send.alloc(8, 0);
      if (st[r].ok()) st[r] = recv.alloc(8 * kWorld, 0);
      if (st[r].ok()) st[r] = buf.upload(poison);
      if (st[r].ok()) st[r] = recv.upload(poison);
      if (st[r].ok()) st[r] = buf.upload(mine.data(), 8, 8 * static_cast<std::size_t>(r));
      if (st[r].ok()) st[r] = send.upload(mine);
      if (st[r].ok()) st[r] = cuda::device_synchronize(0);
      if (st[r].ok())
        st[r] = (*comms)[r]->all_gather(buf.at(8 * static_cast<std::size_t>(r)), buf.get(), 8, *stream);
      if (st[r].ok()) st[r] = (*comms)[r]->all_gather(send.get(), recv.get(), 8, *stream);
      in_place[r].resize(2 * kWorld);
      copied[r].resize(2 * kWorld);
      if (st[r].ok()) st[r] = buf.download(in_place[r].data(), 8 * kWorld);
      if (st[r].ok()) st[r] = recv.download(copied[r].data(), 8 * kWorld);
      cuda::testsupport::stream_destroy(*stream);
    });
  }
  for (auto& t : threads) t.join();
  const std::vector<int> want{0, 1, 10, 11, 20, 21};
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].to_string();
    EXPECT_EQ(in_place[r], want) << "rank " << r;
    EXPECT_EQ(copied[r], want) << "rank " << r;
  }
}

TEST(CudaCpOneGpuCases, ThreadCommunicatorRefusesAMissingDevice) {
  PA_SKIP_WITHOUT_GPU();
  auto comms = dist::make_thread_communicators(2, Device::cuda(cuda::testsupport::device_count()));
  ASSERT_FALSE(comms.ok());
  EXPECT_EQ(comms.status().code(), StatusCode::kDeviceUnavailable);
}

// NCCL with a group of one: ncclCommInitRank, ncclAllGather (a copy) and the whole step run
// on the one GPU, against the oracle.
TEST(CudaCpOneGpuCases, NcclGroupOfOneRunsTheStep) {
  PA_SKIP_WITHOUT_NCCL_GPUS(1);
  for (ShardScheme scheme : {ShardScheme::kInterleaved, ShardScheme::kContiguous}) {
    for (bool sinks : {false, true}) {
      SCOPED_TRACE(std::string(dist::to_string(scheme)) + (sinks ? " sinks" : ""));
      CpCase c;
      c.world = 1;
      c.scheme = scheme;
      c.sinks = sinks;
      expect_matches_oracle(c);
    }
  }
}

TEST(CudaCpOneGpuCases, NcclGroupOfOneAllGather) {
  PA_SKIP_WITHOUT_NCCL_GPUS(1);
  auto id = dist::make_nccl_unique_id();
  ASSERT_TRUE(id.ok()) << id.status().to_string();
  auto comm = dist::make_nccl_communicator(*id, 1, 0, 0);
  ASSERT_TRUE(comm.ok()) << comm.status().to_string();
  EXPECT_EQ((*comm)->world_size(), 1);
  EXPECT_EQ((*comm)->device(), Device::cuda(0));
  DeviceMem send, recv;
  PA_ASSERT_OK(send.alloc(16, 0));
  PA_ASSERT_OK(recv.alloc(16, 0));
  const std::vector<int> mine{7, 8, 9, 10};
  PA_ASSERT_OK(send.upload(mine));
  PA_ASSERT_OK(recv.upload(std::vector<int>(4, -1)));
  PA_ASSERT_OK((*comm)->all_gather(send.get(), recv.get(), 16));  // out of place
  PA_ASSERT_OK(cuda::device_synchronize(0));
  std::vector<int> got(4);
  PA_ASSERT_OK(recv.download(got.data(), 16));
  EXPECT_EQ(got, mine);
  PA_ASSERT_OK((*comm)->all_gather(recv.get(), recv.get(), 16));  // in place
  PA_ASSERT_OK(cuda::device_synchronize(0));
  PA_ASSERT_OK(recv.download(got.data(), 16));
  EXPECT_EQ(got, mine);
}

}  // namespace
}  // namespace pagedattn::cudatest
