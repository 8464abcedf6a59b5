#include "bench/runner.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/cuda/backend/cuda_backend.h"

namespace pagedattn::bench {

double median_of(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double quantile_of(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

namespace {

/// Device memory released on every path.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { cuda::device_free(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  Status allocate(std::size_t bytes) {
    auto p = cuda::device_malloc(std::max<std::size_t>(bytes, 16));
    if (!p.ok()) return p.status();
    ptr_ = *p;
    return Status::Ok();
  }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
};

}  // namespace

namespace {

/// Set to NaN (0xFF bytes, bench_support.h memset_2d) what no call may read in one of the
/// cache tensors `t` (a view over device memory, `layout`, blocks of `w.block_size` dense
/// tokens followed by `w.page_pad` elements): the blocks in `unused`, every block's padding,
/// and the slots past the last token of each sequence's last block.
Status poison_cache(const Workload& w, const TensorView& t, KVLayout layout,
                    const std::vector<std::int32_t>& table, int max_blocks,
                    const std::vector<std::int32_t>& unused, std::int64_t pool) {
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
  const std::int64_t stride = t.strides[0] * es;  // block stride, bytes
  const std::int64_t dense = std::int64_t{w.block_size} * w.num_kv_heads * w.head_size * es;
  auto* base = static_cast<unsigned char*>(t.data);
  for (std::int32_t b : unused)
    PAGEDATTN_RETURN_IF_ERROR(cuda::bench::memset_2d(base + b * stride, stride, 0xFF, stride, 1));
  if (stride > dense)
    PAGEDATTN_RETURN_IF_ERROR(cuda::bench::memset_2d(
        base + dense, static_cast<std::size_t>(stride), 0xFF,
        static_cast<std::size_t>(stride - dense), static_cast<std::size_t>(pool)));
  // Inside a block the token dimension `td` has only dense dimensions after it, and the
  // dimensions between the block and `td` form rows `t.strides[td - 1]` apart: nhd
  // [block, token, head, dim], hnd [block, head, token, dim], split key
  // [block, head, dim / x, token, x] and split value [block, head, dim, token].
  const int td = layout == KVLayout::kNHD ? 1 : layout == KVLayout::kHND ? 2 : 3;
  std::int64_t rows = 1;
  for (int d = 1; d < td; ++d) rows *= t.shape[d];
  const std::int64_t pitch = (td > 1 ? t.strides[td - 1] : t.strides[0]) * es;
  const std::int64_t token = t.strides[td] * es;
  for (std::size_t s = 0; s < w.seq_lens.size(); ++s) {
    const int len = w.seq_lens[s];
    const int used = len % w.block_size;
    if (len == 0 || used == 0) continue;
    const std::int64_t last = table[s * max_blocks + (len - 1) / w.block_size];
    PAGEDATTN_RETURN_IF_ERROR(cuda::bench::memset_2d(
        base + last * stride + used * token, static_cast<std::size_t>(pitch), 0xFF,
        static_cast<std::size_t>((w.block_size - used) * token), static_cast<std::size_t>(rows)));
  }
  return Status::Ok();
}

}  // namespace

Result<BenchResult> run_workload(const Workload& w, int device,
                                 const cuda::bench::TimingOptions& timing, double ceiling_gbps,
                                 std::uint64_t seed, const PlanOptions& options,
                                 const RunOptions& run) {
  const Device dev = Device::cuda(device);
  const int num_seqs = static_cast<int>(w.seq_lens.size());
  std::vector<std::int32_t> seq_lens(w.seq_lens.begin(), w.seq_lens.end());
  std::vector<std::int32_t> qsl(num_seqs + 1, 0);
  int max_blocks = 1;
  std::int64_t needed = 0;
  for (int s = 0; s < num_seqs; ++s) {
    qsl[s + 1] = qsl[s] + (w.query_lens.empty() ? 1 : w.query_lens[s]);
    const int nb = (w.seq_lens[s] + w.block_size - 1) / w.block_size;
    max_blocks = std::max(max_blocks, nb);
    needed += nb;
  }
  const std::int64_t num_tokens = qsl[num_seqs];
  // Physical blocks in a random permutation of a pool a little larger than needed: block
  // tables are never contiguous, as in a serving engine after some churn.
  const std::int64_t pool = needed + 16;
  std::vector<std::int32_t> perm(pool);
  std::iota(perm.begin(), perm.end(), 0);
  SplitMix64 rng{seed};
  for (std::int64_t i = pool - 1; i > 0; --i) std::swap(perm[i], perm[rng.uniform(0, i)]);
  std::vector<std::int32_t> table(static_cast<std::size_t>(num_seqs) * max_blocks, 0);
  std::int64_t next = 0;
  for (int s = 0; s < num_seqs; ++s) {
    const int nb = (w.seq_lens[s] + w.block_size - 1) / w.block_size;
    for (int j = 0; j < nb; ++j) table[static_cast<std::size_t>(s) * max_blocks + j] = perm[next++];
  }

  KVCacheSpec spec{w.layout, pool, w.block_size, w.num_kv_heads, w.head_size, w.kv_dtype,
                   w.page_pad};
  auto elems = kv_cache_elements(spec);
  if (!elems.ok()) return elems.status();
  // The cache's own checks (head size, layout, dtype) before anything is allocated.
  auto shape_check = make_kv_cache(spec, nullptr, nullptr, dev, w.k_scale, w.v_scale);
  if (!shape_check.ok()) return shape_check.status();
  const std::size_t kv_bytes = static_cast<std::size_t>(*elems) * dtype_size(w.kv_dtype);
  const std::size_t q_elems = static_cast<std::size_t>(num_tokens) * w.num_heads * w.head_size;
  DeviceBuffer k, v, q, out, d_table, d_lens, d_qsl, d_alibi, d_sinks, d_lse;
  PAGEDATTN_RETURN_IF_ERROR(k.allocate(kv_bytes));
  PAGEDATTN_RETURN_IF_ERROR(v.allocate(kv_bytes));
  PAGEDATTN_RETURN_IF_ERROR(q.allocate(q_elems * dtype_size(w.dtype)));
  PAGEDATTN_RETURN_IF_ERROR(out.allocate(q_elems * dtype_size(w.dtype)));
  PAGEDATTN_RETURN_IF_ERROR(d_table.allocate(table.size() * 4));
  PAGEDATTN_RETURN_IF_ERROR(d_lens.allocate(seq_lens.size() * 4));
  PAGEDATTN_RETURN_IF_ERROR(d_qsl.allocate(qsl.size() * 4));
  PAGEDATTN_RETURN_IF_ERROR(cuda::bench::fill_uniform(k.get(), w.kv_dtype, *elems, seed + 1, -1, 1));
  PAGEDATTN_RETURN_IF_ERROR(cuda::bench::fill_uniform(v.get(), w.kv_dtype, *elems, seed + 2, -1, 1));
  PAGEDATTN_RETURN_IF_ERROR(cuda::bench::fill_uniform(q.get(), w.dtype, q_elems, seed + 3, -1, 1));
  PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d_table.get(), table.data(), table.size() * 4));
  PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d_lens.get(), seq_lens.data(), seq_lens.size() * 4));
  PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d_qsl.get(), qsl.data(), qsl.size() * 4));

  auto cache = make_kv_cache(spec, k.get(), v.get(), dev, w.k_scale, w.v_scale);
  if (!cache.ok()) return cache.status();
  AttentionArgs args;
  args.query = TensorView::contiguous(q.get(), w.dtype, {num_tokens, w.num_heads, w.head_size}, dev);
  args.out = TensorView::contiguous(out.get(), w.dtype, {num_tokens, w.num_heads, w.head_size}, dev);
  args.cache = *cache;
  args.block_table = TensorView::contiguous(d_table.get(), DType::kInt32, {num_seqs, max_blocks}, dev);
  args.seq_lens = TensorView::contiguous(d_lens.get(), DType::kInt32, {num_seqs}, dev);
  args.query_start_loc = TensorView::contiguous(d_qsl.get(), DType::kInt32, {num_seqs + 1}, dev);
  const std::size_t lse_bytes = static_cast<std::size_t>(num_tokens) * w.num_heads * 4;
  if (w.lse) {
    PAGEDATTN_RETURN_IF_ERROR(d_lse.allocate(lse_bytes));
    args.lse = TensorView::contiguous(d_lse.get(), DType::kFloat32, {num_tokens, w.num_heads}, dev);
  }
  args.params.scale = w.scale > 0 ? w.scale : default_scale(w.head_size);
  args.params.softcap = w.softcap;
  args.params.sliding_window = w.sliding_window;
  // ALiBi: the geometric slopes 2^(-8 (h + 1) / H) of the ALiBi paper; sinks drawn from the
  // seed in [-1, 1).
  std::vector<float> slopes, sinks;
  if (w.alibi) {
    for (int h = 0; h < w.num_heads; ++h)
      slopes.push_back(std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(w.num_heads)));
    PAGEDATTN_RETURN_IF_ERROR(d_alibi.allocate(slopes.size() * 4));
    PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d_alibi.get(), slopes.data(), slopes.size() * 4));
    args.params.alibi_slopes =
        TensorView::contiguous(d_alibi.get(), DType::kFloat32, {w.num_heads}, dev);
  }
  if (w.sinks) {
    SplitMix64 sink_rng{seed ^ 0x73696e6bULL};
    for (int h = 0; h < w.num_heads; ++h)
      sinks.push_back(static_cast<float>(sink_rng.uniform(0, 1 << 20)) / (1 << 19) - 1.0f);
    PAGEDATTN_RETURN_IF_ERROR(d_sinks.allocate(sinks.size() * 4));
    PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(d_sinks.get(), sinks.data(), sinks.size() * 4));
    args.params.sinks = TensorView::contiguous(d_sinks.get(), DType::kFloat32, {w.num_heads}, dev);
  }
  HostMetadata host;
  host.block_table = TensorView::contiguous(table.data(), DType::kInt32, {num_seqs, max_blocks});
  host.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {num_seqs});
  host.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {num_seqs + 1});

  auto plan = plan_attention(args, host, options);
  if (!plan.ok()) return plan.status();
  DeviceBuffer ws;
  PAGEDATTN_RETURN_IF_ERROR(ws.allocate(plan->workspace_bytes()));
  const AttentionPlan& pl = *plan;
  auto call = [&](void* stream) {
    return run_attention(pl, args, ws.get(), plan->workspace_bytes(), stream);
  };

  BenchResult r;
  r.workload = w;
  r.choice = plan->choice();
  r.bytes = useful_bytes(w);
  if (run.check != CheckMode::kNone) {
    const std::vector<std::int32_t> unused(perm.begin() + needed, perm.end());
    PAGEDATTN_RETURN_IF_ERROR(
        poison_cache(w, cache->key, w.layout, table, max_blocks, unused, pool));
    PAGEDATTN_RETURN_IF_ERROR(
        poison_cache(w, cache->value, w.layout, table, max_blocks, unused, pool));
    const std::size_t out_bytes = q_elems * dtype_size(w.dtype);
    PAGEDATTN_RETURN_IF_ERROR(cuda::bench::memset_2d(out.get(), out_bytes, 0xFF, out_bytes, 1));
    if (w.lse)
      PAGEDATTN_RETURN_IF_ERROR(cuda::bench::memset_2d(d_lse.get(), lse_bytes, 0xFF, lse_bytes, 1));
    PAGEDATTN_RETURN_IF_ERROR(call(nullptr));
    PAGEDATTN_RETURN_IF_ERROR(cuda::device_synchronize(device));
    CheckInputs in;
    in.workload = &w;
    in.cache = *cache;
    in.block_table = table.data();
    in.max_blocks = max_blocks;
    in.query_start_loc = qsl.data();
    in.query = q.get();
    in.out = out.get();
    in.lse = w.lse ? d_lse.get() : nullptr;
    in.alibi_slopes = slopes;
    in.sinks = sinks;
    in.scale = args.params.scale;
    auto report = check_output(in, run.check);
    if (!report.ok()) return report.status();
    r.check = *report;
    if (!r.check.pass) return r;
  }

  cuda::bench::TimingOptions t = timing;
  if (run.budget_ms > 0) {
    // A first estimate of one call decides how many calls fit the budget.
    auto probe = cuda::bench::time_call(device, call, {std::min(timing.warmup, 2), 3, timing.flush},
                                        false);
    if (!probe.ok()) return probe.status();
    const double per_call_ms = std::max(1e-3, median_of(*probe) / 1000.0);
    const int fit = static_cast<int>(run.budget_ms / per_call_ms);
    t.iters = std::clamp(fit, std::min(run.min_iters, timing.iters), timing.iters);
    t.warmup = std::min(timing.warmup, std::max(1, fit / 10));
  }
  auto us = cuda::bench::time_call(device, call, t, false);
  if (!us.ok()) return us.status();

  r.iters = t.iters;
  r.median_us = median_of(*us);
  r.p10_us = quantile_of(*us, 0.1);
  r.p90_us = quantile_of(*us, 0.9);
  r.gbps = static_cast<double>(r.bytes) / (r.median_us * 1e-6) / 1e9;
  r.pct_of_ceiling = ceiling_gbps > 0 ? 100.0 * r.gbps / ceiling_gbps : 0;
  r.tflops = static_cast<double>(attention_flops(w)) / (r.median_us * 1e-6) / 1e12;
  if (w.graph) {
    auto g = cuda::bench::time_call(device, call, t, true);
    if (!g.ok()) return g.status();
    r.graph_median_us = median_of(*g);
  }
  return r;
}

}  // namespace pagedattn::bench
