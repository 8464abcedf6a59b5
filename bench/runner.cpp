#include "bench/runner.h"

#include <algorithm>
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

Result<BenchResult> run_workload(const Workload& w, int device,
                                 const cuda::bench::TimingOptions& timing, double ceiling_gbps,
                                 std::uint64_t seed, const PlanOptions& options) {
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
  const std::size_t kv_bytes = static_cast<std::size_t>(*elems) * dtype_size(w.kv_dtype);
  const std::size_t q_elems = static_cast<std::size_t>(num_tokens) * w.num_heads * w.head_size;
  DeviceBuffer k, v, q, out, d_table, d_lens, d_qsl;
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

  auto cache = make_kv_cache(spec, k.get(), v.get(), dev);
  if (!cache.ok()) return cache.status();
  AttentionArgs args;
  args.query = TensorView::contiguous(q.get(), w.dtype, {num_tokens, w.num_heads, w.head_size}, dev);
  args.out = TensorView::contiguous(out.get(), w.dtype, {num_tokens, w.num_heads, w.head_size}, dev);
  args.cache = *cache;
  args.block_table = TensorView::contiguous(d_table.get(), DType::kInt32, {num_seqs, max_blocks}, dev);
  args.seq_lens = TensorView::contiguous(d_lens.get(), DType::kInt32, {num_seqs}, dev);
  args.query_start_loc = TensorView::contiguous(d_qsl.get(), DType::kInt32, {num_seqs + 1}, dev);
  args.params.scale = default_scale(w.head_size);
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
  auto us = cuda::bench::time_call(device, call, timing, false);
  if (!us.ok()) return us.status();

  BenchResult r;
  r.workload = w;
  r.choice = plan->choice();
  r.median_us = median_of(*us);
  r.p10_us = quantile_of(*us, 0.1);
  r.p90_us = quantile_of(*us, 0.9);
  r.bytes = useful_bytes(w);
  r.gbps = static_cast<double>(r.bytes) / (r.median_us * 1e-6) / 1e9;
  r.pct_of_ceiling = ceiling_gbps > 0 ? 100.0 * r.gbps / ceiling_gbps : 0;
  r.tflops = static_cast<double>(attention_flops(w)) / (r.median_us * 1e-6) / 1e12;
  if (w.graph) {
    auto g = cuda::bench::time_call(device, call, timing, true);
    if (!g.ok()) return g.status();
    r.graph_median_us = median_of(*g);
  }
  return r;
}

}  // namespace pagedattn::bench
