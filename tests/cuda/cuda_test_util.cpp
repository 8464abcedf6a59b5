#include "tests/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "src/testing/harness.h"

namespace pagedattn::cudatest {


Result<std::unique_ptr<Problem>> Problem::make(const ProblemSpec& spec, bool query_at_end) {
  auto p = std::make_unique<Problem>();
  p->spec_ = spec;
  Rng rng(spec.seed);
  Rng table_rng(spec.seed ^ 0x5bd1e995u);
  Rng& trng = spec.per_sequence_data ? table_rng : rng;
  const int num_seqs = static_cast<int>(spec.seq_lens.size());
  const std::int64_t H = spec.num_heads, KVH = spec.num_kv_heads, D = spec.head_size,
                     BS = spec.block_size;
  const bool fp8 = is_fp8(spec.kv_dtype);
  const float k_scale = fp8 ? 0.5f : 1.0f, v_scale = fp8 ? 0.25f : 1.0f;

  // block table: random permutation of a pool larger than needed
  std::int64_t needed = 0, max_blocks = 0;
  std::vector<std::int64_t> nb(static_cast<std::size_t>(num_seqs));
  for (int s = 0; s < num_seqs; ++s) {
    nb[s] = (spec.seq_lens[s] + BS - 1) / BS;
    needed += nb[s];
    max_blocks = std::max(max_blocks, nb[s]);
  }
  const std::int64_t pool = needed + 3;
  std::vector<std::int32_t> perm(static_cast<std::size_t>(pool));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::int64_t i = pool - 1; i > 0; --i)
    std::swap(perm[i], perm[trng.below(static_cast<std::uint64_t>(i + 1))]);
  p->width_ = max_blocks + 1;
  p->block_table_.assign(static_cast<std::size_t>(num_seqs * p->width_), perm[pool - 1]);
  std::int64_t next = 0;
  for (int s = 0; s < num_seqs; ++s)
    for (std::int64_t j = 0; j < nb[s]; ++j) p->block_table_[s * p->width_ + j] = perm[next++];

  // caches: poisoned (0xFF = NaN in every float format), written by the writer oracle
  KVCacheSpec cs;
  cs.layout = spec.layout;
  cs.num_blocks = pool;
  cs.block_size = spec.block_size;
  cs.num_kv_heads = spec.num_kv_heads;
  cs.head_size = spec.head_size;
  cs.dtype = spec.kv_dtype;
  cs.page_pad = spec.page_pad;
  auto elems = kv_cache_elements(cs);
  if (!elems.ok()) return elems.status();
  const std::size_t cache_bytes = static_cast<std::size_t>(*elems) * dtype_size(spec.kv_dtype);
  p->kc_host_.assign(cache_bytes, 0xFF);
  p->vc_host_.assign(cache_bytes, 0xFF);
  auto hc = make_kv_cache(cs, p->kc_host_.data(), p->vc_host_.data(), Device::cpu(), k_scale,
                          v_scale);
  if (!hc.ok()) return hc.status();
  p->host_cache_ = *hc;
  {
    std::int64_t rows = 0;
    for (int s = 0; s < num_seqs; ++s) rows += spec.seq_lens[s];
    const std::size_t es = dtype_size(spec.dtype);
    std::vector<std::uint8_t> kb(static_cast<std::size_t>(std::max<std::int64_t>(rows, 1) * KVH * D) * es);
    std::vector<std::uint8_t> vb(kb.size());
    std::vector<std::int64_t> slots;
    std::int64_t r = 0;
    for (int s = 0; s < num_seqs; ++s) {
      Rng seq_rng(spec.seed + 7919u * static_cast<std::uint64_t>(s + 1));
      Rng& drng = spec.per_sequence_data ? seq_rng : rng;
      for (int t = 0; t < spec.seq_lens[s]; ++t, ++r) {
        slots.push_back(static_cast<std::int64_t>(p->block_table_[s * p->width_ + t / BS]) * BS + t % BS);
        for (std::int64_t e = 0; e < KVH * D; ++e) {
          const bool inf_key = s == 0 && t == 5 && e == spec.inf_key_kv_head * D;
          numeric::store_from_float(kb.data(), spec.dtype, r * KVH * D + e,
                                    inf_key ? INFINITY : drng.uniform(-1, 1));
          numeric::store_from_float(vb.data(), spec.dtype, r * KVH * D + e, drng.uniform(-1, 1));
        }
      }
    }
    if (rows > 0) {
      const TensorView hk = TensorView::contiguous(kb.data(), spec.dtype, {rows, KVH, D});
      const TensorView hv = TensorView::contiguous(vb.data(), spec.dtype, {rows, KVH, D});
      const TensorView hs = TensorView::contiguous(slots.data(), DType::kInt64, {rows});
      PAGEDATTN_RETURN_IF_ERROR(reference_write_kv(hk, hv, hs, p->host_cache_));
    }
  }

  // query, metadata, per-head vectors
  p->starts_.assign(static_cast<std::size_t>(num_seqs) + 1, 0);
  for (int s = 0; s < num_seqs; ++s) p->starts_[s + 1] = p->starts_[s] + spec.query_lens[s];
  const std::int64_t T = p->starts_.back();
  p->num_tokens_ = T;
  const std::size_t qbytes = static_cast<std::size_t>(T * H * D) * dtype_size(spec.dtype);
  p->q_host_.resize(qbytes);
  if (spec.per_sequence_data) {
    for (int s = 0; s < num_seqs; ++s) {
      Rng qrng(spec.seed + 104729u * static_cast<std::uint64_t>(s + 1));
      for (std::int64_t i = p->starts_[s] * H * D; i < p->starts_[s + 1] * H * D; ++i)
        numeric::store_from_float(p->q_host_.data(), spec.dtype, i, qrng.uniform(-1, 1));
    }
  } else {
    for (std::int64_t i = 0; i < T * H * D; ++i)
      numeric::store_from_float(p->q_host_.data(), spec.dtype, i, rng.uniform(-1, 1));
  }
  p->seq_lens_.assign(spec.seq_lens.begin(), spec.seq_lens.end());
  p->alibi_.resize(static_cast<std::size_t>(H));
  p->sinks_.resize(static_cast<std::size_t>(H));
  for (std::int64_t h = 0; h < H; ++h) {
    p->alibi_[h] = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(H));
    p->sinks_[h] = rng.uniform(-1.0f, 3.0f);
  }

  // device copies
  const std::size_t two_mib = std::size_t{2} << 20;
  const std::size_t qalloc = query_at_end ? (qbytes + two_mib - 1) / two_mib * two_mib
                                          : std::max<std::size_t>(qbytes + spec.query_offset_bytes, 1);
  p->q_offset_ = query_at_end ? qalloc - qbytes : spec.query_offset_bytes;
  PAGEDATTN_RETURN_IF_ERROR(p->q_mem_.alloc(qalloc, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->q_mem_.upload(p->q_host_.data(), qbytes, p->q_offset_));
  PAGEDATTN_RETURN_IF_ERROR(p->out_mem_.alloc(std::max<std::size_t>(qbytes, 1), spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->lse_mem_.alloc(static_cast<std::size_t>(std::max<std::int64_t>(T * H, 1)) * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->kc_mem_.alloc(cache_bytes, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->kc_mem_.upload(p->kc_host_));
  PAGEDATTN_RETURN_IF_ERROR(p->vc_mem_.alloc(cache_bytes, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->vc_mem_.upload(p->vc_host_));
  PAGEDATTN_RETURN_IF_ERROR(p->bt_mem_.alloc(p->block_table_.size() * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->bt_mem_.upload(p->block_table_));
  PAGEDATTN_RETURN_IF_ERROR(p->sl_mem_.alloc(p->seq_lens_.size() * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->sl_mem_.upload(p->seq_lens_));
  PAGEDATTN_RETURN_IF_ERROR(p->qsl_mem_.alloc(p->starts_.size() * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->qsl_mem_.upload(p->starts_));
  PAGEDATTN_RETURN_IF_ERROR(p->al_mem_.alloc(p->alibi_.size() * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->al_mem_.upload(p->alibi_));
  PAGEDATTN_RETURN_IF_ERROR(p->sk_mem_.alloc(p->sinks_.size() * 4, spec.device));
  PAGEDATTN_RETURN_IF_ERROR(p->sk_mem_.upload(p->sinks_));
  PAGEDATTN_RETURN_IF_ERROR(p->poison_outputs());

  const Device dev = Device::cuda(spec.device);
  auto dc = make_kv_cache(cs, p->kc_mem_.get(), p->vc_mem_.get(), dev, k_scale, v_scale);
  if (!dc.ok()) return dc.status();
  AttentionArgs& a = p->args_;
  a.query = TensorView::contiguous(p->q_mem_.at(p->q_offset_), spec.dtype, {T, H, D}, dev);
  a.out = TensorView::contiguous(p->out_mem_.get(), spec.dtype, {T, H, D}, dev);
  if (spec.lse) a.lse = TensorView::contiguous(p->lse_mem_.get(), DType::kFloat32, {T, H}, dev);
  a.cache = *dc;
  if (!spec.device_k_scales.empty()) {
    const std::int64_t n = static_cast<std::int64_t>(spec.device_k_scales.size());
    PAGEDATTN_RETURN_IF_ERROR(p->ksc_mem_.alloc(static_cast<std::size_t>(n) * 4, spec.device));
    PAGEDATTN_RETURN_IF_ERROR(p->vsc_mem_.alloc(static_cast<std::size_t>(n) * 4, spec.device));
    PAGEDATTN_RETURN_IF_ERROR(p->set_device_scales(spec.device_k_scales, spec.device_v_scales));
    a.cache.k_scales = TensorView::contiguous(p->ksc_mem_.get(), DType::kFloat32, {n}, dev);
    a.cache.v_scales = TensorView::contiguous(p->vsc_mem_.get(), DType::kFloat32, {n}, dev);
  }
  a.block_table = TensorView::contiguous(p->bt_mem_.get(), DType::kInt32, {num_seqs, p->width_}, dev);
  a.seq_lens = TensorView::contiguous(p->sl_mem_.get(), DType::kInt32, {num_seqs}, dev);
  a.query_start_loc = TensorView::contiguous(p->qsl_mem_.get(), DType::kInt32, {num_seqs + 1}, dev);
  a.params.scale = default_scale(spec.head_size) * spec.scale_boost;
  a.params.softcap = spec.softcap;
  a.params.sliding_window = spec.sliding_window;
  if (spec.alibi) a.params.alibi_slopes = TensorView::contiguous(p->al_mem_.get(), DType::kFloat32, {H}, dev);
  if (spec.sinks) a.params.sinks = TensorView::contiguous(p->sk_mem_.get(), DType::kFloat32, {H}, dev);
  p->host_.block_table =
      TensorView::contiguous(p->block_table_.data(), DType::kInt32, {num_seqs, p->width_});
  p->host_.seq_lens = TensorView::contiguous(p->seq_lens_.data(), DType::kInt32, {num_seqs});
  p->host_.query_start_loc =
      TensorView::contiguous(p->starts_.data(), DType::kInt32, {num_seqs + 1});
  return p;
}

Status Problem::plan() { return plan_with(host_); }

Status Problem::plan_with(const HostMetadata& host) {
  auto pl = plan_attention(args_, host, spec_.plan);
  if (!pl.ok()) return pl.status();
  plan_ = *pl;
  ws_mem_ = DeviceMem();
  if (plan_.workspace_bytes() > 0)
    PAGEDATTN_RETURN_IF_ERROR(ws_mem_.alloc(plan_.workspace_bytes(), spec_.device));
  return Status::Ok();
}

Status Problem::plan_for_lengths(const std::vector<std::int32_t>& planned) {
  HostMetadata host = host_;
  host.seq_lens = TensorView::contiguous(const_cast<std::int32_t*>(planned.data()), DType::kInt32,
                                         {static_cast<std::int64_t>(planned.size())});
  return plan_with(host);
}

Status Problem::run(void* stream) {
  return run_attention(plan_, args_, ws_mem_.get(), plan_.workspace_bytes(), stream);
}

Status Problem::run_with_workspace(void* workspace, std::size_t bytes, void* stream) {
  return run_attention(plan_, args_, workspace, bytes, stream);
}

Status Problem::run_convenience(void* stream) {
  return paged_attention(args_, host_, stream, spec_.plan);
}

Status Problem::poison_outputs() {
  PAGEDATTN_RETURN_IF_ERROR(cuda::testsupport::memset_device(out_mem_.get(), 0xFF, out_mem_.size()));
  return cuda::testsupport::memset_device(lse_mem_.get(), 0xFF, lse_mem_.size());
}

Status Problem::set_device_scales(const std::vector<float>& k, const std::vector<float>& v) {
  spec_.device_k_scales = k;
  spec_.device_v_scales = v;
  PAGEDATTN_RETURN_IF_ERROR(ksc_mem_.upload(k));
  return vsc_mem_.upload(v);
}

std::vector<std::uint8_t> Problem::out_bytes() const { return out_mem_.bytes(); }
std::vector<std::uint8_t> Problem::lse_bytes() const { return lse_mem_.bytes(); }

std::string Problem::check_against_oracle() const {
  const std::int64_t T = num_tokens_, H = spec_.num_heads, D = spec_.head_size;
  const int num_seqs = static_cast<int>(spec_.seq_lens.size());
  std::vector<float> ref(static_cast<std::size_t>(std::max<std::int64_t>(T * H * D, 1)), NAN);
  std::vector<float> ref_lse(static_cast<std::size_t>(std::max<std::int64_t>(T * H, 1)), NAN);
  AttentionArgs ra;
  ra.query = TensorView::contiguous(const_cast<std::uint8_t*>(q_host_.data()), spec_.dtype, {T, H, D});
  ra.out = TensorView::contiguous(ref.data(), DType::kFloat32, {T, H, D});
  ra.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {T, H});
  ra.cache = host_cache_;
  ra.block_table = host_.block_table;
  ra.seq_lens = host_.seq_lens;
  ra.query_start_loc = host_.query_start_loc;
  ra.params = args_.params;
  ra.params.alibi_slopes =
      spec_.alibi ? TensorView::contiguous(const_cast<float*>(alibi_.data()), DType::kFloat32, {H})
                  : TensorView{};
  ra.params.sinks =
      spec_.sinks ? TensorView::contiguous(const_cast<float*>(sinks_.data()), DType::kFloat32, {H})
                  : TensorView{};
  if (spec_.device_k_scales.empty()) {
    const Status st = reference_attention(ra);
    if (!st.ok()) return "reference_attention: " + st.to_string();
  } else {
    // Device scales: one oracle run per KV head with its values as the host scalars, keeping
    // that head's query heads.
    const std::int64_t grp = H / spec_.num_kv_heads;
    std::vector<float> r2(ref.size()), l2(ref_lse.size());
    ra.out = TensorView::contiguous(r2.data(), DType::kFloat32, {T, H, D});
    ra.lse = TensorView::contiguous(l2.data(), DType::kFloat32, {T, H});
    for (int g = 0; g < spec_.num_kv_heads; ++g) {
      const std::size_t j = spec_.device_k_scales.size() > 1 ? static_cast<std::size_t>(g) : 0;
      ra.cache.k_scale = spec_.device_k_scales[j];
      ra.cache.v_scale = spec_.device_v_scales[j];
      const Status st = reference_attention(ra);
      if (!st.ok()) return "reference_attention: " + st.to_string();
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t h = g * grp; h < (g + 1) * grp; ++h) {
          ref_lse[static_cast<std::size_t>(t * H + h)] = l2[static_cast<std::size_t>(t * H + h)];
          for (std::int64_t d = 0; d < D; ++d)
            ref[static_cast<std::size_t>((t * H + h) * D + d)] =
                r2[static_cast<std::size_t>((t * H + h) * D + d)];
        }
    }
  }
  (void)num_seqs;
  const auto tol = testing::tolerance_for(spec_.dtype, spec_.kv_dtype);
  const std::vector<std::uint8_t> got = out_bytes();
  const std::vector<std::uint8_t> got_lse = lse_bytes();
  std::int64_t bad = 0;
  std::ostringstream first;
  const std::int64_t group = H / spec_.num_kv_heads;
  auto skipped = [&](std::int64_t head) { return head / group == spec_.inf_key_kv_head; };
  for (std::int64_t i = 0; i < T * H * D; ++i) {
    if (skipped((i / D) % H)) continue;
    const double g = numeric::load_as_float(got.data(), spec_.dtype, i);
    const double r = ref[static_cast<std::size_t>(i)];
    if (!(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r))) {
      if (bad++ == 0)
        first << "out[token " << i / (H * D) << ", head " << (i / D) % H << ", dim " << i % D
              << "] = " << g << ", reference " << r;
    }
  }
  if (spec_.lse) {
    for (std::int64_t i = 0; i < T * H; ++i) {
      if (skipped(i % H)) continue;
      float g;
      std::memcpy(&g, got_lse.data() + 4 * i, 4);
      const double r = ref_lse[static_cast<std::size_t>(i)];
      if (!(std::fabs(g - r) <= tol.atol + tol.rtol * std::fabs(r))) {
        if (bad++ == 0)
          first << "lse[token " << i / H << ", head " << i % H << "] = " << g << ", reference " << r;
      }
    }
  }
  if (bad == 0) return std::string();
  std::ostringstream os;
  os << bad << " elements outside the tolerance; first: " << first.str();
  return os.str();
}

void expect_graph_replay_equals_eager(Problem& pr, int* programmatic_edges) {
  auto stream = cuda::testsupport::stream_create();
  ASSERT_TRUE(stream.ok());
  PA_ASSERT_OK(pr.run(*stream));
  PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*stream));
  const auto eager_out = pr.out_bytes();
  const auto eager_lse = pr.lse_bytes();
  EXPECT_EQ(pr.check_against_oracle(), "");

  PA_ASSERT_OK(pr.poison_outputs());
  PA_ASSERT_OK(cuda::device_synchronize());
  PA_ASSERT_OK(cuda::testsupport::capture_begin(*stream));
  const Status run_st = pr.run(*stream);
  auto exec = cuda::testsupport::capture_end(*stream, programmatic_edges);
  PA_ASSERT_OK(run_st);
  ASSERT_TRUE(exec.ok()) << exec.status().to_string();
  for (int replay = 0; replay < 2; ++replay) {
    PA_ASSERT_OK(cuda::testsupport::graph_launch(*exec, *stream));
    PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*stream));
    EXPECT_TRUE(pr.out_bytes() == eager_out) << "replay " << replay << ": out differs from eager";
    EXPECT_TRUE(pr.lse_bytes() == eager_lse) << "replay " << replay << ": lse differs from eager";
    PA_ASSERT_OK(pr.poison_outputs());
    PA_ASSERT_OK(cuda::device_synchronize());
  }
  cuda::testsupport::graph_destroy(*exec);
  cuda::testsupport::stream_destroy(*stream);
}

void expect_on_decode_fast_path(const testing::CaseConfig& config, testing::CaseResult* result) {
  *result = testing::run_case(config);
  const testing::CaseResult& r = *result;
  ASSERT_TRUE(r.status.ok()) << r.status.to_string();
  EXPECT_GT(r.elements_checked, 0);
  EXPECT_EQ(r.choice.kernel, KernelId::kCudaDecodeMMA) << r.choice.reason;
  EXPECT_TRUE(r.pass) << r.detail << "\n  splits " << r.choice.num_splits << ", worst ratio "
                      << r.worst_ratio << "\n  " << r.choice.reason;
}

std::string indexed_case_name(const ::testing::TestParamInfo<testing::CaseConfig>& info) {
  return testing::case_name(info.param) + "_" + std::to_string(info.index);
}

}  // namespace pagedattn::cudatest
