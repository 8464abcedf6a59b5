#include "bench/check.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>

#include <fmt/format.h>

#include "pagedattn/pagedattn.h"
#include "pagedattn/reference.h"
#include "src/core/numeric.h"
#include "src/cuda/backend/cuda_backend.h"
#include "src/testing/harness.h"

namespace pagedattn::bench {

const char* to_string(CheckMode mode) {
  switch (mode) {
    case CheckMode::kNone: return "none";
    case CheckMode::kSampled: return "sampled";
    case CheckMode::kFull: return "full";
    case CheckMode::kAuto: return "auto";
  }
  return "?";
}

Result<CheckMode> parse_check_mode(const std::string& text, const char* flag) {
  for (CheckMode m : {CheckMode::kNone, CheckMode::kSampled, CheckMode::kFull, CheckMode::kAuto})
    if (text == to_string(m)) return m;
  return Status(StatusCode::kInvalidArgument,
                std::string(flag) + " '" + text + "': expected none, sampled, full or auto");
}

namespace {

int query_len(const Workload& w, std::size_t s) {
  return w.query_lens.empty() ? 1 : w.query_lens[s];
}

std::int64_t blocks_of(const Workload& w, std::size_t s) {
  return (std::int64_t{w.seq_lens[s]} + w.block_size - 1) / w.block_size;
}

/// Keys the longest row of sequence `s` attends (its last row: every key, or the window).
std::int64_t row_keys(const Workload& w, std::size_t s) {
  return w.sliding_window > 0 ? std::min(w.seq_lens[s], w.sliding_window) : w.seq_lens[s];
}

std::int64_t block_stride_bytes(const Workload& w) {
  const std::int64_t elems =
      std::int64_t{w.block_size} * w.num_kv_heads * w.head_size + w.page_pad;
  return elems * static_cast<std::int64_t>(dtype_size(w.kv_dtype));
}

/// The dimension of a cache view that indexes KV heads (key and value alike).
int head_dim(KVLayout layout) { return layout == KVLayout::kNHD ? 2 : 1; }

/// `v` restricted to KV head `h`.
TensorView one_kv_head(TensorView v, KVLayout layout, int h) {
  const int d = head_dim(layout);
  v.data = static_cast<unsigned char*>(v.data) +
           static_cast<std::int64_t>(h) * v.strides[d] * static_cast<std::int64_t>(dtype_size(v.dtype));
  v.shape[d] = 1;
  return v;
}

}  // namespace

CheckMode check_mode_for(const Workload& w, CheckMode mode) {
  if (mode != CheckMode::kAuto) return mode;
  double macs = 0, bytes = 0;
  for (std::size_t s = 0; s < w.seq_lens.size(); ++s) {
    const int q = query_len(w, s);
    if (q <= 0) continue;
    macs += 2.0 * q * static_cast<double>(row_keys(w, s)) * w.num_heads * w.head_size;
    bytes += 2.0 * static_cast<double>(blocks_of(w, s)) * static_cast<double>(block_stride_bytes(w));
  }
  return macs <= 2147483648.0 && bytes <= 1073741824.0 ? CheckMode::kFull : CheckMode::kSampled;
}

std::string CheckReport::summary() const {
  if (mode == CheckMode::kNone) return "not checked";
  return fmt::format("{} {}: {} seq{} x {} head{}, worst {:.3g} of the tolerance",
                     pass ? "pass" : "FAIL", to_string(mode), seqs_checked,
                     seqs_checked == 1 ? "" : "s", heads_checked, heads_checked == 1 ? "" : "s",
                     worst_ratio);
}

Result<CheckReport> check_output(const CheckInputs& in, CheckMode requested) {
  const Workload& w = *in.workload;
  const CheckMode mode = check_mode_for(w, requested);
  CheckReport report;
  report.mode = mode;
  if (mode == CheckMode::kNone) return report;
  const int num_seqs = static_cast<int>(w.seq_lens.size());
  const int H = w.num_heads, Hkv = w.num_kv_heads, D = w.head_size, gqa = H / Hkv;
  const std::int64_t T = in.query_start_loc[num_seqs];
  const std::size_t qes = dtype_size(w.dtype);
  const std::size_t q_bytes = static_cast<std::size_t>(T) * H * D * qes;
  std::vector<unsigned char> out(std::max<std::size_t>(q_bytes, 1)), query(out.size());
  auto* copy = in.copy_to_host ? in.copy_to_host : &cuda::copy_to_host;
  PAGEDATTN_RETURN_IF_ERROR(copy(out.data(), in.out, q_bytes));
  PAGEDATTN_RETURN_IF_ERROR(copy(query.data(), in.query, q_bytes));
  std::vector<float> lse(in.lse ? static_cast<std::size_t>(T) * H : 0);
  if (in.lse) PAGEDATTN_RETURN_IF_ERROR(copy(lse.data(), in.lse, lse.size() * sizeof(float)));
  for (std::size_t i = 0; i < lse.size(); ++i) {
    if (!std::isfinite(lse[i])) {
      const std::int64_t row = static_cast<std::int64_t>(i) / H;
      report.pass = false;
      report.detail = fmt::format("lse of output token {}, head {} is {} (an unwritten row?)",
                                  row, static_cast<std::int64_t>(i) % H, lse[i]);
      report.worst_ratio = INFINITY;
      return report;
    }
  }

  // Every row is written and none read poisoned memory: no NaN anywhere (the inputs are
  // finite, and so is every logit).
  for (std::int64_t i = 0; i < T * H * D; ++i) {
    if (!std::isfinite(numeric::load_as_float(out.data(), w.dtype, i))) {
      const std::int64_t row = i / (std::int64_t{H} * D);
      const int seq = static_cast<int>(
          std::upper_bound(in.query_start_loc, in.query_start_loc + num_seqs + 1, row) -
          in.query_start_loc - 1);
      report.pass = false;
      report.detail = fmt::format(
          "output token {} (sequence {}, seq_len {}), head {}, dim {} is {} (an unwritten row, "
          "or a read of the NaN-poisoned memory past the sequence)",
          row, seq, w.seq_lens[seq], (i / D) % H, i % D,
          numeric::load_as_float(out.data(), w.dtype, i));
      report.worst_ratio = INFINITY;
      return report;
    }
  }

  // The sequences and query heads to recompute: (KV head, first query head of its group,
  // count) each. Full: every group whole (its query heads share the key reads). Sampled: query
  // heads 0 and H - 1 alone, the first and the last of their groups, so that a wrong GQA
  // mapping shows, at a quarter of a group's cost on the longest sequence.
  struct Heads {
    int kv_head, g_begin, g_count;
  };
  std::vector<int> seqs;
  std::vector<Heads> heads;
  if (mode == CheckMode::kFull) {
    for (int s = 0; s < num_seqs; ++s)
      if (query_len(w, s) > 0) seqs.push_back(s);
    for (int h = 0; h < Hkv; ++h) heads.push_back({h, 0, gqa});
  } else {
    int first = -1, last = -1, longest = -1;
    for (int s = 0; s < num_seqs; ++s) {
      if (query_len(w, s) <= 0) continue;
      if (first < 0) first = s;
      last = s;
      if (longest < 0 || w.seq_lens[s] > w.seq_lens[longest]) longest = s;
    }
    for (int s : {first, longest, last})
      if (s >= 0 && std::find(seqs.begin(), seqs.end(), s) == seqs.end()) seqs.push_back(s);
    std::sort(seqs.begin(), seqs.end());
    heads.push_back({0, 0, 1});
    if (H > 1) heads.push_back({Hkv - 1, gqa - 1, 1});
  }
  report.seqs_checked = static_cast<int>(seqs.size());
  report.heads_checked = 0;
  for (const Heads& h : heads) report.heads_checked += h.g_count;
  if (seqs.empty()) return report;

  // The checked sequences' blocks, copied into a compact host cache of the same layout.
  const std::int64_t stride_bytes = block_stride_bytes(w);
  std::int64_t total_blocks = 0;
  std::vector<std::int64_t> first_block(seqs.size());
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    first_block[i] = total_blocks;
    total_blocks += std::max<std::int64_t>(1, blocks_of(w, seqs[i]));
  }
  std::vector<unsigned char> hk(static_cast<std::size_t>(total_blocks * stride_bytes));
  std::vector<unsigned char> hv(hk.size());
  std::vector<std::int32_t> table(static_cast<std::size_t>(total_blocks), 0);
  const auto* dk = static_cast<const unsigned char*>(in.cache.key.data);
  const auto* dv = static_cast<const unsigned char*>(in.cache.value.data);
  for (std::size_t i = 0; i < seqs.size(); ++i) {
    const std::int64_t nb = blocks_of(w, seqs[i]);
    for (std::int64_t j = 0; j < nb; ++j) {
      const std::int64_t phys = in.block_table[seqs[i] * in.max_blocks + j];
      const std::int64_t dst = first_block[i] + j;
      table[static_cast<std::size_t>(dst)] = static_cast<std::int32_t>(dst);
      PAGEDATTN_RETURN_IF_ERROR(
          copy(hk.data() + dst * stride_bytes, dk + phys * stride_bytes, stride_bytes));
      PAGEDATTN_RETURN_IF_ERROR(
          copy(hv.data() + dst * stride_bytes, dv + phys * stride_bytes, stride_bytes));
    }
  }
  KVCacheSpec spec{w.layout, total_blocks, w.block_size, w.num_kv_heads, w.head_size, w.kv_dtype,
                   w.page_pad};
  auto host_cache = make_kv_cache(spec, hk.data(), hv.data(), Device::cpu(), w.k_scale, w.v_scale);
  if (!host_cache.ok()) return host_cache.status();

  struct Task {
    std::size_t seq_index = 0;
    Heads heads{0, 0, 0};
    Status status = Status::Ok();
    double max_abs = 0, worst = 0;
    std::int64_t elements = 0;
    std::string detail;
  };
  std::vector<Task> tasks;
  for (std::size_t i = 0; i < seqs.size(); ++i)
    for (const Heads& h : heads) {
      Task t;
      t.seq_index = i;
      t.heads = h;
      tasks.push_back(std::move(t));
    }

  auto run_task = [&](Task& t) {
    const int s = seqs[t.seq_index];
    const std::int64_t row0 = in.query_start_loc[s];
    const std::int64_t q = query_len(w, s);
    const std::int64_t nb = std::max<std::int64_t>(1, blocks_of(w, s));
    const int kvh = t.heads.kv_head, g0 = t.heads.g_begin, ng = t.heads.g_count;
    const std::int64_t head0 = std::int64_t{kvh} * gqa + g0;  // first query head of the task
    std::vector<float> ref(static_cast<std::size_t>(q * ng * D));
    std::vector<float> ref_lse(in.lse ? static_cast<std::size_t>(q * ng) : 0);
    std::int32_t seq_len = w.seq_lens[s];
    std::int32_t qsl[2] = {0, static_cast<std::int32_t>(q)};
    AttentionArgs a;
    a.query = TensorView::strided(query.data() + (row0 * H + head0) * D * qes, w.dtype,
                                  {q, ng, D}, {std::int64_t{H} * D, D, 1});
    a.out = TensorView::contiguous(ref.data(), DType::kFloat32, {q, ng, D});
    if (in.lse) a.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {q, ng});
    a.cache = *host_cache;
    a.cache.key = one_kv_head(host_cache->key, w.layout, kvh);
    a.cache.value = one_kv_head(host_cache->value, w.layout, kvh);
    a.block_table = TensorView::contiguous(table.data() + first_block[t.seq_index],
                                           DType::kInt32, {1, nb});
    a.seq_lens = TensorView::contiguous(&seq_len, DType::kInt32, {1});
    a.query_start_loc = TensorView::contiguous(qsl, DType::kInt32, {2});
    a.params.scale = in.scale;
    a.params.softcap = w.softcap;
    a.params.sliding_window = w.sliding_window;
    std::vector<float> slopes, sinks;
    if (!in.alibi_slopes.empty()) {
      slopes.assign(in.alibi_slopes.begin() + head0, in.alibi_slopes.begin() + head0 + ng);
      a.params.alibi_slopes = TensorView::contiguous(slopes.data(), DType::kFloat32, {ng});
    }
    if (!in.sinks.empty()) {
      sinks.assign(in.sinks.begin() + head0, in.sinks.begin() + head0 + ng);
      a.params.sinks = TensorView::contiguous(sinks.data(), DType::kFloat32, {ng});
    }
    t.status = reference_attention(a);
    if (!t.status.ok()) return;
    const testing::Tolerance tol = testing::tolerance_for(w.dtype, w.kv_dtype, row_keys(w, s));
    // The LSE is fp32 whatever the dtype, and gets the output's budget (as the test harness).
    for (std::int64_t r = 0; r < q && in.lse; ++r)
      for (int g = 0; g < ng; ++g) {
        const std::int64_t head = head0 + g;
        const double got = lse[static_cast<std::size_t>((row0 + r) * H + head)];
        const double want = ref_lse[static_cast<std::size_t>(r * ng + g)];
        const double err = std::fabs(got - want);
        const double ratio = err / (tol.atol + tol.rtol * std::fabs(want));
        ++t.elements;
        if (!(ratio <= t.worst)) {
          t.worst = std::isnan(ratio) ? INFINITY : ratio;
          if (t.worst > 1 && t.detail.empty())
            t.detail = fmt::format("lse of sequence {} (seq_len {}), query row {}, head {}: got "
                                   "{}, oracle {}", s, w.seq_lens[s], r, head, got, want);
        }
      }
    for (std::int64_t r = 0; r < q; ++r)
      for (int g = 0; g < ng; ++g)
        for (int d = 0; d < D; ++d) {
          const std::int64_t head = head0 + g;
          const float got =
              numeric::load_as_float(out.data(), w.dtype, ((row0 + r) * H + head) * D + d);
          const double want = ref[static_cast<std::size_t>((r * ng + g) * D + d)];
          const double err = std::fabs(static_cast<double>(got) - want);
          const double ratio = err / (tol.atol + tol.rtol * std::fabs(want));
          ++t.elements;
          t.max_abs = std::max(t.max_abs, err);
          if (!(ratio <= t.worst)) {
            t.worst = std::isnan(ratio) ? INFINITY : ratio;
            if (t.worst > 1 && t.detail.empty())
              t.detail = fmt::format(
                  "sequence {} (seq_len {}), query row {}, head {}, dim {}: got {}, oracle {} "
                  "(|diff| {:.3g} > atol {:.3g} + rtol {:.3g} x |oracle|)",
                  s, w.seq_lens[s], r, head, d, got, want, err, tol.atol, tol.rtol);
          }
        }
  };
  std::atomic<std::size_t> next{0};
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t n_threads = std::min<std::size_t>(tasks.size(), hw);
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i + 1 < n_threads; ++i)
    pool.emplace_back([&] {
      for (std::size_t k; (k = next++) < tasks.size();) run_task(tasks[k]);
    });
  for (std::size_t k; (k = next++) < tasks.size();) run_task(tasks[k]);
  for (auto& th : pool) th.join();

  for (const Task& t : tasks) {
    if (!t.status.ok())
      return Status(t.status.code(), "the oracle: " + t.status.message());
    report.elements += t.elements;
    report.max_abs_error = std::max(report.max_abs_error, t.max_abs);
    if (t.worst > report.worst_ratio) report.worst_ratio = t.worst;
    if (t.worst > 1 && report.detail.empty()) report.detail = t.detail;
  }
  report.pass = report.worst_ratio <= 1;
  return report;
}

}  // namespace pagedattn::bench
