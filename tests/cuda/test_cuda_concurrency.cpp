// The library called from several host threads at once on one GPU. Per-process CUDA state, such
// as a kernel's dynamic shared-memory attribute, is shared by every thread: a call must not
// change it in a way that breaks another thread's launch in flight.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "src/testing/fill.h"
#include "src/testing/harness.h"

#include "tests/cuda/cuda_test_util.h"
#include "tests/run_together.h"

namespace pagedattn::cudatest {
namespace {

// Two calls of one tiled-kernel instance (fp32 query and cache, head 128: the same template
// arguments) that need different amounts of shared memory, both above 48 KiB: forced tiles of
// 64 and 32 tokens. Before the fix each launch set the function's limit to its own size, so a
// thread that set 160 KB could find it lowered to 80 KB by the other thread before its launch
// (cudaErrorInvalidValue, reported as kInternal).
TEST(CudaConcurrency, TiledCallsWithDifferentSharedMemoryOnTwoThreads) {
  PA_SKIP_WITHOUT_GPU();
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<void*> streams;
  for (int tile : {64, 32}) {
    ProblemSpec s;
    s.num_heads = 8;
    s.num_kv_heads = 2;
    s.head_size = 128;
    s.dtype = s.kv_dtype = DType::kFloat32;
    s.seq_lens = {300, 77, 129};
    s.query_lens = {5, 1, 9};
    s.plan.tile_tokens = tile;
    s.seed = 40 + static_cast<std::uint64_t>(tile);
    auto p = Problem::make(s);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    PA_ASSERT_OK((*p)->plan());
    ASSERT_EQ((*p)->attention_plan().choice().kernel, KernelId::kCudaTiled);
    ASSERT_GT((*p)->attention_plan().choice().shared_memory_bytes, 48 * 1024);
    problems.push_back(std::move(p).value());
    auto st = cuda::testsupport::stream_create();
    ASSERT_TRUE(st.ok());
    streams.push_back(*st);
  }
  ASSERT_NE(problems[0]->attention_plan().choice().shared_memory_bytes,
            problems[1]->attention_plan().choice().shared_memory_bytes);

  constexpr int kIters = 2000;
  std::vector<std::string> errors(2);
  testutil::run_together(2, [&](int i) {
    for (int it = 0; it < kIters; ++it) {
      const Status st = problems[static_cast<std::size_t>(i)]->run(streams[static_cast<std::size_t>(i)]);
      if (!st.ok()) {
        errors[static_cast<std::size_t>(i)] = "iteration " + std::to_string(it) + ": " + st.to_string();
        return;
      }
    }
  });
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(errors[static_cast<std::size_t>(i)], "") << "thread " << i;
    PA_ASSERT_OK(cuda::testsupport::stream_synchronize(streams[static_cast<std::size_t>(i)]));
    EXPECT_EQ(problems[static_cast<std::size_t>(i)]->check_against_oracle(), "") << "thread " << i;
    cuda::testsupport::stream_destroy(streams[static_cast<std::size_t>(i)]);
  }
}


// Several host threads, each with its own stream, plan, buffers and sequences, over ONE device
// cache whose first blocks hold a shared prefix that every thread's sequences read (by
// reference, as the replay's prefix sharing does) and nobody writes. Each thread appends its
// sequences' tokens with write_kv into its own blocks and runs attention on its stream, step
// after step, the threads' kernels overlapping; every step is checked against the oracle on a
// host copy of the cache written by the CPU writer. Meant also for compute-sanitizer
// (racecheck: shared-memory hazards of overlapping kernels; memcheck: reads of the shared
// blocks). PAGEDATTN_CONCURRENCY_STEPS overrides the step count (default 6).
TEST(CudaConcurrency, ThreadsStreamsAndPlansOverASharedPrefix) {
  PA_SKIP_WITHOUT_GPU();
  constexpr int kThreads = 4;
  constexpr int H = 8, KVH = 2, D = 128, B = 16;
  constexpr int kPrefixBlocks = 3;  // 48 shared tokens, whole blocks: no sharer writes them
  const DType dt = DType::kBFloat16;
  int steps = 6;
  if (const char* e = std::getenv("PAGEDATTN_CONCURRENCY_STEPS")) steps = std::max(1, std::atoi(e));
  // Thread t: 2 + t sequences; even ones decode (1 token a step), odd ones take chunks of
  // 3 + t tokens, except thread 1, which only decodes (the decode kernels next to the mixed
  // batches' tiled one). Private blocks per sequence: enough for every step.
  auto seqs_of = [](int t) { return 2 + t; };
  auto qlen = [](int t, int i) { return i % 2 == 0 || t == 1 ? 1 : 3 + t; };
  const int max_private = (steps * (3 + kThreads) + B - 1) / B + 1;
  int total_seqs = 0;
  for (int t = 0; t < kThreads; ++t) total_seqs += seqs_of(t);
  const std::int64_t num_blocks = kPrefixBlocks + static_cast<std::int64_t>(total_seqs) * max_private;

  KVCacheSpec spec;
  spec.layout = KVLayout::kNHD;
  spec.num_blocks = num_blocks;
  spec.block_size = B;
  spec.num_kv_heads = KVH;
  spec.head_size = D;
  spec.dtype = dt;
  const std::int64_t elements = kv_cache_elements(spec).value();
  const std::size_t cache_bytes = static_cast<std::size_t>(elements) * dtype_size(dt);
  std::vector<std::uint8_t> hk(cache_bytes, 0xFF), hv(cache_bytes, 0xFF);  // NaN poison
  DeviceMem dk, dv;
  PA_ASSERT_OK(dk.alloc(cache_bytes));
  PA_ASSERT_OK(dv.alloc(cache_bytes));
  KVCache host_cache = make_kv_cache(spec, hk.data(), hv.data(), Device::cpu()).value();

  // The shared prefix: written once by the CPU writer into the host copy, uploaded whole.
  {
    const std::int64_t n = kPrefixBlocks * B;
    std::vector<std::uint8_t> k(static_cast<std::size_t>(n * KVH * D) * dtype_size(dt));
    std::vector<std::uint8_t> v(k.size());
    testing::SplitMix64 rng(99);
    for (std::int64_t i = 0; i < n * KVH * D; ++i) {
      numeric::store_from_float(k.data(), dt, i, static_cast<float>(rng.uniform(-1, 1)));
      numeric::store_from_float(v.data(), dt, i, static_cast<float>(rng.uniform(-1, 1)));
    }
    std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) slots[static_cast<std::size_t>(i)] = i;  // blocks 0..2
    PA_ASSERT_OK(write_kv(TensorView::contiguous(k.data(), dt, {n, KVH, D}),
                          TensorView::contiguous(v.data(), dt, {n, KVH, D}),
                          TensorView::contiguous(slots.data(), DType::kInt64, {n}), host_cache));
  }
  PA_ASSERT_OK(dk.upload(hk.data(), cache_bytes));
  PA_ASSERT_OK(dv.upload(hv.data(), cache_bytes));
  KVCache dev_cache = make_kv_cache(spec, dk.get(), dv.get(), Device::cuda(0)).value();
  const std::vector<std::uint8_t> prefix_before_k(hk.begin(), hk.begin() + cache_bytes / num_blocks * kPrefixBlocks);

  const float scale = testing::kDefaultScaleBoost * default_scale(D);
  std::vector<std::string> errors(kThreads);
  std::vector<int> kernels(kThreads, -1);
  int first_private = kPrefixBlocks;
  std::vector<int> private_base(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    private_base[static_cast<std::size_t>(t)] = first_private;
    first_private += seqs_of(t) * max_private;
  }

  testutil::run_together(kThreads, [&](int t) {
    std::string& err = errors[static_cast<std::size_t>(t)];
    auto fail = [&](int step, const std::string& what) {
      if (err.empty()) err = "step " + std::to_string(step) + ": " + what;
    };
    Result<void*> stream_r = cuda::testsupport::stream_create();
    if (!stream_r.ok()) return fail(-1, stream_r.status().to_string());
    void* stream = *stream_r;
    const int S = seqs_of(t);
    std::vector<std::vector<std::int32_t>> tables(static_cast<std::size_t>(S));
    std::vector<std::int32_t> lens(static_cast<std::size_t>(S), kPrefixBlocks * B);
    for (int i = 0; i < S; ++i) {
      for (int b = 0; b < kPrefixBlocks; ++b) tables[static_cast<std::size_t>(i)].push_back(b);
    }
    int next_block = private_base[static_cast<std::size_t>(t)];
    const int W = kPrefixBlocks + max_private;
    int T_max = 0;
    for (int i = 0; i < S; ++i) T_max += qlen(t, i);
    DeviceMem q, k, v, slots_d, bt_d, sl_d, qsl_d, out_d, lse_d, ws;
    const std::size_t es = dtype_size(dt);
    for (auto [m, bytes] : {std::make_pair(&q, std::size_t(T_max) * H * D * es),
                            std::make_pair(&k, std::size_t(T_max) * KVH * D * es),
                            std::make_pair(&v, std::size_t(T_max) * KVH * D * es),
                            std::make_pair(&slots_d, std::size_t(T_max) * 8),
                            std::make_pair(&bt_d, std::size_t(S) * W * 4),
                            std::make_pair(&sl_d, std::size_t(S) * 4),
                            std::make_pair(&qsl_d, std::size_t(S + 1) * 4),
                            std::make_pair(&out_d, std::size_t(T_max) * H * D * es),
                            std::make_pair(&lse_d, std::size_t(T_max) * H * 4)}) {
      const Status st = m->alloc(bytes);
      if (!st.ok()) return fail(-1, st.to_string());
    }
    testing::SplitMix64 rng(1000 + static_cast<std::uint64_t>(t));
    for (int step = 0; step < steps && err.empty(); ++step) {
      // ---- this step's tokens
      const int T = T_max;
      std::vector<std::uint8_t> qh(std::size_t(T) * H * D * es), kh(std::size_t(T) * KVH * D * es),
          vh(std::size_t(T) * KVH * D * es);
      for (std::int64_t i = 0; i < std::int64_t(T) * H * D; ++i) {
        numeric::store_from_float(qh.data(), dt, i, static_cast<float>(rng.uniform(-1, 1)));
      }
      for (std::int64_t i = 0; i < std::int64_t(T) * KVH * D; ++i) {
        numeric::store_from_float(kh.data(), dt, i, static_cast<float>(rng.uniform(-1, 1)));
        numeric::store_from_float(vh.data(), dt, i, static_cast<float>(rng.uniform(-1, 1)));
      }
      std::vector<std::int64_t> slots;
      std::vector<std::int32_t> bt(std::size_t(S) * W, 0), sl(S), qsl(S + 1, 0);
      for (int i = 0; i < S; ++i) {
        auto& table = tables[static_cast<std::size_t>(i)];
        const int n = qlen(t, i);
        for (int j = 0; j < n; ++j) {
          const std::int32_t pos = lens[static_cast<std::size_t>(i)] + j;
          if (pos / B >= static_cast<int>(table.size())) table.push_back(next_block++);
          slots.push_back(std::int64_t(table[static_cast<std::size_t>(pos / B)]) * B + pos % B);
        }
        lens[static_cast<std::size_t>(i)] += n;
        std::copy(table.begin(), table.end(), bt.begin() + std::ptrdiff_t(i) * W);
        sl[static_cast<std::size_t>(i)] = lens[static_cast<std::size_t>(i)];
        qsl[static_cast<std::size_t>(i) + 1] = qsl[static_cast<std::size_t>(i)] + n;
      }
      for (auto [m, src, bytes] :
           {std::make_tuple(&q, static_cast<const void*>(qh.data()), qh.size()),
            std::make_tuple(&k, static_cast<const void*>(kh.data()), kh.size()),
            std::make_tuple(&v, static_cast<const void*>(vh.data()), vh.size()),
            std::make_tuple(&slots_d, static_cast<const void*>(slots.data()), slots.size() * 8),
            std::make_tuple(&bt_d, static_cast<const void*>(bt.data()), bt.size() * 4),
            std::make_tuple(&sl_d, static_cast<const void*>(sl.data()), sl.size() * 4),
            std::make_tuple(&qsl_d, static_cast<const void*>(qsl.data()), qsl.size() * 4)}) {
        const Status st = m->upload(src, bytes);
        if (!st.ok()) return fail(step, st.to_string());
      }
      // ---- write the new K/V: device on this thread's stream, host copy by the CPU writer
      const Device dev = Device::cuda(0);
      WriteKVOptions wo;
      wo.host_slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {T});
      Status st = write_kv(TensorView::contiguous(k.get(), dt, {T, KVH, D}, dev),
                           TensorView::contiguous(v.get(), dt, {T, KVH, D}, dev),
                           TensorView::contiguous(slots_d.get(), DType::kInt64, {T}, dev),
                           dev_cache, stream, wo);
      if (!st.ok()) return fail(step, "write_kv: " + st.to_string());
      st = write_kv(TensorView::contiguous(kh.data(), dt, {T, KVH, D}),
                    TensorView::contiguous(vh.data(), dt, {T, KVH, D}),
                    TensorView::contiguous(slots.data(), DType::kInt64, {T}), host_cache);
      if (!st.ok()) return fail(step, "host write_kv: " + st.to_string());
      // ---- attention: each thread its own plan (thread 2 forces a 32-token tile)
      AttentionArgs args;
      args.query = TensorView::contiguous(q.get(), dt, {T, H, D}, dev);
      args.cache = dev_cache;
      args.block_table = TensorView::contiguous(bt_d.get(), DType::kInt32, {S, W}, dev);
      args.seq_lens = TensorView::contiguous(sl_d.get(), DType::kInt32, {S}, dev);
      args.query_start_loc = TensorView::contiguous(qsl_d.get(), DType::kInt32, {S + 1}, dev);
      args.out = TensorView::contiguous(out_d.get(), dt, {T, H, D}, dev);
      args.lse = TensorView::contiguous(lse_d.get(), DType::kFloat32, {T, H}, dev);
      args.params.scale = scale;
      HostMetadata host;
      host.block_table = TensorView::contiguous(bt.data(), DType::kInt32, {S, W});
      host.seq_lens = TensorView::contiguous(sl.data(), DType::kInt32, {S});
      host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {S + 1});
      PlanOptions po;
      if (t == 2) po.tile_tokens = 32;
      Result<AttentionPlan> plan = plan_attention(args, host, po);
      if (!plan.ok()) return fail(step, "plan_attention: " + plan.status().to_string());
      kernels[static_cast<std::size_t>(t)] = static_cast<int>(plan->choice().kernel);
      if (plan->workspace_bytes() > ws.size()) {
        ws = DeviceMem();
        st = ws.alloc(plan->workspace_bytes());
        if (!st.ok()) return fail(step, st.to_string());
      }
      st = run_attention(*plan, args, ws.get(), ws.size(), stream);
      if (!st.ok()) return fail(step, "run_attention: " + st.to_string());
      st = cuda::testsupport::stream_synchronize(stream);
      if (!st.ok()) return fail(step, "stream_synchronize: " + st.to_string());
      std::vector<std::uint8_t> out_h(std::size_t(T) * H * D * es);
      std::vector<float> lse_h(std::size_t(T) * H);
      if (!(st = out_d.download(out_h.data(), out_h.size())).ok() ||
          !(st = lse_d.download(lse_h.data(), lse_h.size() * 4)).ok()) {
        return fail(step, st.to_string());
      }
      // ---- the oracle on the host copy
      std::vector<float> ref(std::size_t(T) * H * D), ref_lse(std::size_t(T) * H);
      AttentionArgs ra;
      ra.query = TensorView::contiguous(qh.data(), dt, {T, H, D});
      ra.cache = host_cache;
      ra.block_table = host.block_table;
      ra.seq_lens = host.seq_lens;
      ra.query_start_loc = host.query_start_loc;
      ra.out = TensorView::contiguous(ref.data(), DType::kFloat32, {T, H, D});
      ra.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {T, H});
      ra.params.scale = scale;
      st = reference_attention(ra);
      if (!st.ok()) return fail(step, "reference_attention: " + st.to_string());
      const testing::Tolerance tol = testing::tolerance_for(dt, dt);
      for (std::int64_t i = 0; i < std::int64_t(T) * H * D; ++i) {
        const double g = numeric::load_as_float(out_h.data(), dt, i), r = ref[std::size_t(i)];
        if (!(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r))) {
          std::ostringstream os;
          os << "out[" << i / (H * D) << ", head " << (i / D) % H << ", dim " << i % D
             << "] = " << g << ", oracle " << r;
          return fail(step, os.str());
        }
      }
      for (std::int64_t i = 0; i < std::int64_t(T) * H; ++i) {
        const double g = lse_h[std::size_t(i)], r = ref_lse[std::size_t(i)];
        if (!(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r))) {
          return fail(step, "lse[" + std::to_string(i) + "] = " + std::to_string(g) +
                                ", oracle " + std::to_string(r));
        }
      }
    }
    cuda::testsupport::stream_destroy(stream);
  });
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(errors[static_cast<std::size_t>(t)], "") << "thread " << t;
  }
  // Nobody wrote into the shared prefix: its device blocks are still what was uploaded.
  std::vector<std::uint8_t> now(prefix_before_k.size());
  PA_ASSERT_OK(dk.download(now.data(), now.size()));
  EXPECT_TRUE(now == prefix_before_k) << "the shared prefix blocks changed";
  // Every thread planned and ran; which kernels overlapped is logged (thread 1 decodes only,
  // the others run mixed batches).
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_NE(kernels[static_cast<std::size_t>(t)], -1) << "thread " << t;
    std::printf("thread %d: %s\n", t,
                kernels[static_cast<std::size_t>(t)] < 0
                    ? "-"
                    : to_string(static_cast<KernelId>(kernels[static_cast<std::size_t>(t)])));
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
