#include "src/core/validate.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace pagedattn::validate {

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, message);
}
Status unsupported(const std::string& message) {
  return Status(StatusCode::kUnsupported, message);
}

namespace {
std::string s(std::int64_t v) { return std::to_string(v); }
bool is_float(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16;
}
}  // namespace

Status require_defined(const TensorView& t, const char* name) {
  if (!t.defined()) return invalid(std::string(name) + ": required tensor is absent (ndim 0)");
  return Status::Ok();
}

Status require_ndim(const TensorView& t, const char* name, int ndim) {
  if (t.ndim != ndim)
    return invalid(std::string(name) + ".ndim = " + s(t.ndim) + ": expected " + s(ndim) + " (" +
                   t.describe() + ")");
  return Status::Ok();
}

Status require_dtype(const TensorView& t, const char* name, DType dtype) {
  if (t.dtype != dtype)
    return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) + ": expected " +
                   to_string(dtype));
  return Status::Ok();
}

Status require_float_dtype(const TensorView& t, const char* name) {
  if (!is_float(t.dtype))
    return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) +
                   ": expected fp32, fp16 or bf16");
  return Status::Ok();
}

Status require_index_dtype(const TensorView& t, const char* name) {
  if (t.dtype != DType::kInt32 && t.dtype != DType::kInt64)
    return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) +
                   ": expected int32 or int64");
  return Status::Ok();
}

Status require_shape(const TensorView& t, const char* name, int dim, std::int64_t expected) {
  if (t.shape[dim] != expected)
    return invalid(std::string(name) + ".shape[" + s(dim) + "] = " + s(t.shape[dim]) +
                   ": expected " + s(expected));
  return Status::Ok();
}

Status require_non_negative_strides(const TensorView& t, const char* name) {
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return invalid(std::string(name) + ".shape[" + s(d) + "] = " + s(t.shape[d]) +
                     ": expected >= 0");
    if (t.strides[d] < 0)
      return invalid(std::string(name) + ".strides[" + s(d) + "] = " + s(t.strides[d]) +
                     ": negative strides are not supported");
  }
  return Status::Ok();
}

Status require_inner_contiguous(const TensorView& t, const char* name) {
  if (t.ndim > 0 && t.shape[t.ndim - 1] > 1 && t.strides[t.ndim - 1] != 1)
    return invalid(std::string(name) + ".strides[" + s(t.ndim - 1) + "] = " +
                   s(t.strides[t.ndim - 1]) + ": the last dimension must be contiguous (1)");
  return Status::Ok();
}

Status require_same_device(const TensorView& t, const char* name, const Device& device) {
  if (t.device != device)
    return invalid(std::string(name) + ".device = " + to_string(t.device) + ": expected " +
                   to_string(device) + " (all tensors of one call live on one device)");
  return Status::Ok();
}

Status require_data(const TensorView& t, const char* name) {
  if (t.numel() > 0 && t.data == nullptr)
    return invalid(std::string(name) + ".data is null");
  return Status::Ok();
}

Status require_contiguous(const TensorView& t, const char* name) {
  if (!t.is_contiguous())
    return invalid(std::string(name) + " " + t.describe() + ": expected a contiguous tensor");
  return Status::Ok();
}

bool non_overlapping(const TensorView& t) {
  // A tensor without elements has no two at one address, whatever its strides.
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] == 0) return true;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;  // (stride, size)
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] > 1) dims.emplace_back(t.strides[d], t.shape[d]);
  }
  std::sort(dims.begin(), dims.end());
  std::int64_t covered = 1;  // span of the dimensions seen so far
  for (const auto& [stride, size] : dims) {
    if (stride < covered) return false;
    covered = stride * (size - 1) + covered;
  }
  return true;
}

Status require_non_overlapping(const TensorView& t, const char* name) {
  if (!non_overlapping(t))
    return invalid(std::string(name) + " " + t.describe() +
                   ": elements overlap (a written tensor needs distinct addresses)");
  return Status::Ok();
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.strides[d] != b.strides[d])) return false;
  return true;
}

namespace {

/// Bytes [lo, hi) that some element of `t` touches, relative to its data pointer.
std::pair<std::int64_t, std::int64_t> byte_span(const TensorView& t) {
  std::int64_t lo = 0, hi = 0;
  for (int d = 0; d < t.ndim; ++d) {
    const std::int64_t reach = t.strides[d] * (t.shape[d] - 1);
    if (reach < 0) lo += reach;
    else hi += reach;
  }
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(t.dtype));
  return {lo * es, (hi + 1) * es};
}

/// Whether offset `delta` (elements) equals sum_k m_k * stride_k with |m_k| < size_k over
/// `dims` (stride, size), strides descending, each larger than the reach of the ones after it
/// (a non-overlapping view): then m_k is floor or ceil of delta / stride_k at every level.
bool reachable(std::int64_t delta, const std::vector<std::pair<std::int64_t, std::int64_t>>& dims,
               std::size_t k) {
  if (k == dims.size()) return delta == 0;
  const auto [stride, size] = dims[k];
  const std::int64_t q = delta / stride;  // truncates toward zero
  for (std::int64_t m : {q - 1, q, q + 1}) {
    if (m <= -size || m >= size) continue;
    if (reachable(delta - m * stride, dims, k + 1)) return true;
  }
  return false;
}

}  // namespace

bool share_memory(const TensorView& a, const TensorView& b) {
  if (!a.data || !b.data || !(a.device == b.device)) return false;
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto pa = reinterpret_cast<std::intptr_t>(a.data);
  const auto pb = reinterpret_cast<std::intptr_t>(b.data);
  const auto [alo, ahi] = byte_span(a);
  const auto [blo, bhi] = byte_span(b);
  if (pa + ahi <= pb + blo || pb + bhi <= pa + alo) return false;
  // The spans meet. Views of one geometry (e.g. query and output interleaved in one packed
  // buffer) can still be element-disjoint; anything else counts as sharing.
  if (a.dtype != b.dtype || a.ndim != b.ndim || !non_overlapping(a)) return true;
  std::vector<std::pair<std::int64_t, std::int64_t>> dims;
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] != b.shape[d]) return true;
    if (a.shape[d] <= 1) continue;
    if (a.strides[d] != b.strides[d] || a.strides[d] <= 0) return true;
    dims.emplace_back(a.strides[d], a.shape[d]);
  }
  const std::int64_t es = static_cast<std::int64_t>(dtype_size(a.dtype));
  const std::int64_t delta_bytes = static_cast<std::int64_t>(pb - pa);
  if (delta_bytes % es != 0) return true;
  std::sort(dims.begin(), dims.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return reachable(delta_bytes / es, dims, 0);
}

Status require_disjoint(const TensorView& written, const char* written_name, const TensorView& other,
                        const char* other_name, bool exact_alias_ok) {
  if (!share_memory(written, other)) return Status::Ok();
  if (exact_alias_ok && same_view(written, other)) return Status::Ok();
  return invalid(std::string(written_name) + " " + written.describe() + " shares memory with " +
                 other_name + " " + other.describe() +
                 (exact_alias_ok ? ": they must be the same view (an exact alias) or disjoint"
                                 : ": a written tensor must not overlap an input"));
}

namespace {

/// A float tensor of an exact shape, last dim contiguous, on `device`.
Status require_float_tensor(const TensorView& t, const char* name,
                            std::initializer_list<std::int64_t> shape, const Device& device,
                            bool need_data) {
  PAGEDATTN_RETURN_IF_ERROR(require_defined(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(t, name, static_cast<int>(shape.size())));
  int d = 0;
  for (std::int64_t want : shape) {
    PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, d, want));
    ++d;
  }
  PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_inner_contiguous(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(t, name, device));
  if (need_data) PAGEDATTN_RETURN_IF_ERROR(require_data(t, name));
  return Status::Ok();
}

Status require_int32_tensor(const TensorView& t, const char* name, int ndim, const Device& device,
                            bool need_data) {
  PAGEDATTN_RETURN_IF_ERROR(require_defined(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(t, name, ndim));
  PAGEDATTN_RETURN_IF_ERROR(require_dtype(t, name, DType::kInt32));
  PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(t, name, device));
  if (need_data) PAGEDATTN_RETURN_IF_ERROR(require_data(t, name));
  return Status::Ok();
}

Status require_per_head_vector(const TensorView& t, const char* name, std::int64_t num_heads,
                               const Device& device, bool need_data) {
  if (!t.defined()) return Status::Ok();
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(t, name, 1));
  PAGEDATTN_RETURN_IF_ERROR(require_dtype(t, name, DType::kFloat32));
  PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, 0, num_heads));
  PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(t, name, device));
  if (need_data) PAGEDATTN_RETURN_IF_ERROR(require_data(t, name));
  return Status::Ok();
}

/// A `[num_tokens, num_heads]` fp32 log-sum-exp tensor (attention's lse, the merge's inputs
/// and output); `written` adds the no-overlap rule of outputs.
Status require_lse_tensor(const TensorView& t, const char* name, std::int64_t num_tokens,
                          std::int64_t num_heads, const Device& device, bool need_data,
                          bool written) {
  PAGEDATTN_RETURN_IF_ERROR(require_defined(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_dtype(t, name, DType::kFloat32));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(t, name, 2));
  PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, 0, num_tokens));
  PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, 1, num_heads));
  PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(t, name));
  if (written) PAGEDATTN_RETURN_IF_ERROR(require_non_overlapping(t, name));
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(t, name, device));
  if (need_data) PAGEDATTN_RETURN_IF_ERROR(require_data(t, name));
  return Status::Ok();
}

std::int32_t at32(const TensorView& t, std::int64_t i) {
  return static_cast<const std::int32_t*>(t.data)[i * t.strides[0]];
}

}  // namespace

Status attention_args(const AttentionArgs& args, bool need_data, KVCacheGeometry* geometry) {
  const TensorView& q = args.query;
  PAGEDATTN_RETURN_IF_ERROR(require_defined(q, "query"));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(q, "query", 3));
  PAGEDATTN_RETURN_IF_ERROR(require_float_dtype(q, "query"));
  const Device dev = q.device;
  const std::int64_t num_tokens = q.shape[0], num_heads = q.shape[1], head_size = q.shape[2];
  PAGEDATTN_RETURN_IF_ERROR(
      require_float_tensor(q, "query", {num_tokens, num_heads, head_size}, dev, need_data));
  if (num_heads <= 0) return invalid("query.shape[1] (num_heads) = " + s(num_heads) + ": expected > 0");
  // Kernels index heads with 32-bit integers.
  if (num_heads > std::numeric_limits<std::int32_t>::max())
    return invalid("query.shape[1] (num_heads) = " + s(num_heads) + ": exceeds int32");

  auto geo = describe_kv_cache(args.cache);
  if (!geo.ok()) return geo.status();
  const KVCacheGeometry& g = *geo;
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(args.cache.key, "key_cache", dev));
  if (need_data) {
    PAGEDATTN_RETURN_IF_ERROR(require_data(args.cache.key, "key_cache"));
    PAGEDATTN_RETURN_IF_ERROR(require_data(args.cache.value, "value_cache"));
  }
  if (head_size != g.head_size)
    return invalid("query.shape[2] (head_size) = " + s(head_size) +
                   ": expected the cache's head_size " + s(g.head_size));
  if (num_heads % g.num_kv_heads != 0)
    return invalid("num_heads = " + s(num_heads) + " is not a multiple of num_kv_heads = " +
                   s(g.num_kv_heads));
  if (!is_fp8(g.dtype) && g.dtype != q.dtype)
    return invalid(std::string("key_cache.dtype = ") + to_string(g.dtype) +
                   ": expected the query dtype " + to_string(q.dtype) + " or an fp8 dtype");

  PAGEDATTN_RETURN_IF_ERROR(
      require_float_tensor(args.out, "out", {num_tokens, num_heads, head_size}, dev, need_data));
  PAGEDATTN_RETURN_IF_ERROR(require_dtype(args.out, "out", q.dtype));
  PAGEDATTN_RETURN_IF_ERROR(require_non_overlapping(args.out, "out"));
  if (args.lse.defined())
    PAGEDATTN_RETURN_IF_ERROR(
        require_lse_tensor(args.lse, "lse", num_tokens, num_heads, dev, need_data, true));

  PAGEDATTN_RETURN_IF_ERROR(require_int32_tensor(args.seq_lens, "seq_lens", 1, dev, need_data));
  const std::int64_t num_seqs = args.seq_lens.shape[0];
  // Kernels index sequences with 32-bit integers, and query_start_loc has num_seqs + 1 entries.
  if (num_seqs >= std::numeric_limits<std::int32_t>::max())
    return invalid("seq_lens.shape[0] (num_seqs) = " + s(num_seqs) + ": exceeds int32 - 1");
  PAGEDATTN_RETURN_IF_ERROR(
      require_int32_tensor(args.query_start_loc, "query_start_loc", 1, dev, need_data));
  // seq_lens fixes num_seqs; the messages name it, since either tensor may be the wrong one.
  if (args.query_start_loc.shape[0] != num_seqs + 1)
    return invalid("query_start_loc.shape[0] = " + s(args.query_start_loc.shape[0]) +
                   " and seq_lens.shape[0] = " + s(num_seqs) +
                   ": expected query_start_loc to have num_seqs + 1 entries");
  PAGEDATTN_RETURN_IF_ERROR(require_int32_tensor(args.block_table, "block_table", 2, dev, need_data));
  if (args.block_table.shape[0] != num_seqs)
    return invalid("block_table.shape[0] = " + s(args.block_table.shape[0]) +
                   " and seq_lens.shape[0] = " + s(num_seqs) + ": expected one row per sequence");

  const AttentionParams& p = args.params;
  if (!(std::isfinite(p.scale) && p.scale > 0))
    return invalid("scale = " + std::to_string(p.scale) + ": expected a finite value > 0");
  if (!(std::isfinite(p.softcap) && p.softcap >= 0))
    return invalid("softcap = " + std::to_string(p.softcap) + ": expected >= 0 (0 = off)");
  if (p.sliding_window < 0)
    return invalid("sliding_window = " + s(p.sliding_window) + ": expected >= 0 (0 = off)");
  PAGEDATTN_RETURN_IF_ERROR(
      require_per_head_vector(p.alibi_slopes, "alibi_slopes", num_heads, dev, need_data));
  PAGEDATTN_RETURN_IF_ERROR(require_per_head_vector(p.sinks, "sinks", num_heads, dev, need_data));
  // Written tensors against everything the call reads (and each other): an output that
  // partly overlaps an input would be read after it was overwritten. The output may be the
  // query itself (each row is read before it is written).
  {
    const std::pair<const TensorView*, const char*> inputs[] = {
        {&args.cache.key, "key_cache"},       {&args.cache.value, "value_cache"},
        {&args.block_table, "block_table"},   {&args.seq_lens, "seq_lens"},
        {&args.query_start_loc, "query_start_loc"}, {&args.params.alibi_slopes, "alibi_slopes"},
        {&args.params.sinks, "sinks"}};
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(args.out, "out", q, "query", true));
    for (const auto& [t, name] : inputs)
      if (t->defined()) PAGEDATTN_RETURN_IF_ERROR(require_disjoint(args.out, "out", *t, name, false));
    if (args.lse.defined()) {
      PAGEDATTN_RETURN_IF_ERROR(require_disjoint(args.lse, "lse", q, "query", false));
      PAGEDATTN_RETURN_IF_ERROR(require_disjoint(args.lse, "lse", args.out, "out", false));
      for (const auto& [t, name] : inputs)
        if (t->defined()) PAGEDATTN_RETURN_IF_ERROR(require_disjoint(args.lse, "lse", *t, name, false));
    }
  }
  if (geometry) *geometry = g;
  return Status::Ok();
}

namespace {

/// The elements of a 1-D fp32 host tensor (none for an undefined or device tensor).
std::vector<float> host_floats(const TensorView& t) {
  std::vector<float> v;
  if (!t.defined() || t.data == nullptr || t.device.type != DeviceType::kCPU) return v;
  const auto* d = static_cast<const float*>(t.data);
  v.reserve(static_cast<std::size_t>(t.shape[0]));
  for (std::int64_t i = 0; i < t.shape[0]; ++i) v.push_back(d[i * t.strides[0]]);
  return v;
}

std::string value_text(float x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return std::to_string(x);
}

}  // namespace

Status host_scale_values(const KVCache& cache, const KVCacheGeometry& g) {
  if (!is_fp8(g.dtype)) return Status::Ok();
  for (const auto& [t, name] : {std::pair<const TensorView&, const char*>{cache.k_scales, "k_scales"},
                                std::pair<const TensorView&, const char*>{cache.v_scales, "v_scales"}}) {
    const std::vector<float> v = host_floats(t);
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!(std::isfinite(v[i]) && v[i] > 0))
        return invalid(std::string(name) + "[" + s(static_cast<std::int64_t>(i)) + "] = " +
                       value_text(v[i]) + ": expected a finite value > 0");
  }
  return Status::Ok();
}

Status host_parameter_values(const AttentionParams& p, const KVCache& cache,
                             const KVCacheGeometry& g) {
  const std::vector<float> slopes = host_floats(p.alibi_slopes);
  for (std::size_t i = 0; i < slopes.size(); ++i)
    if (!std::isfinite(slopes[i]))
      return invalid("alibi_slopes[" + s(static_cast<std::int64_t>(i)) + "] = " +
                     value_text(slopes[i]) + ": expected a finite value");
  const std::vector<float> sinks = host_floats(p.sinks);
  for (std::size_t i = 0; i < sinks.size(); ++i)
    if (std::isnan(sinks[i]) || sinks[i] == std::numeric_limits<float>::infinity())
      return invalid("sinks[" + s(static_cast<std::int64_t>(i)) + "] = " + value_text(sinks[i]) +
                     ": expected a finite value or -inf (no sink)");
  return host_scale_values(cache, g);
}

Status host_metadata(const AttentionArgs& args, const HostMetadata& host,
                     const KVCacheGeometry& g, BatchSummary* summary) {
  const Device cpu = Device::cpu();
  struct Pair {
    const TensorView& host;
    const TensorView& arg;
    const char* name;
  };
  for (const Pair& pr : {Pair{host.seq_lens, args.seq_lens, "host seq_lens"},
                         Pair{host.query_start_loc, args.query_start_loc, "host query_start_loc"},
                         Pair{host.block_table, args.block_table, "host block_table"}}) {
    PAGEDATTN_RETURN_IF_ERROR(require_int32_tensor(pr.host, pr.name, pr.arg.ndim, cpu, true));
    for (int d = 0; d < pr.arg.ndim; ++d)
      PAGEDATTN_RETURN_IF_ERROR(require_shape(pr.host, pr.name, d, pr.arg.shape[d]));
  }
  const std::int64_t num_seqs = host.seq_lens.shape[0];
  const std::int64_t num_tokens = args.query.shape[0];
  const std::int64_t width = host.block_table.shape[1];
  const TensorView& qsl = host.query_start_loc;
  if (at32(qsl, 0) != 0)
    return invalid("query_start_loc[0] = " + s(at32(qsl, 0)) + ": expected 0");
  if (at32(qsl, num_seqs) != num_tokens)
    return invalid("query_start_loc[" + s(num_seqs) + "] = " + s(at32(qsl, num_seqs)) +
                   ": expected num_tokens = query.shape[0] = " + s(num_tokens));
  BatchSummary b;
  b.num_seqs = static_cast<int>(num_seqs);
  b.num_tokens = num_tokens;
  const std::int32_t* bt = static_cast<const std::int32_t*>(host.block_table.data);
  for (std::int64_t i = 0; i < num_seqs; ++i) {
    const std::int64_t q0 = at32(qsl, i), q1 = at32(qsl, i + 1);
    if (q1 < q0)
      return invalid("query_start_loc[" + s(i + 1) + "] = " + s(q1) + " < query_start_loc[" +
                     s(i) + "] = " + s(q0) + ": expected a non-decreasing prefix sum");
    const std::int64_t qlen = q1 - q0;
    const std::int64_t slen = at32(host.seq_lens, i);
    if (slen < 0) return invalid("seq_lens[" + s(i) + "] = " + s(slen) + ": expected >= 0");
    if (qlen == 0) {
      ++b.num_empty_seqs;
      continue;  // skipped sequence: reads nothing, so its block-table row is not checked
    }
    if (slen < qlen)
      return invalid("seq_lens[" + s(i) + "] = " + s(slen) + " < query_len " + s(qlen) +
                     ": seq_len includes this step's new tokens");
    const std::int64_t nblocks = (slen + g.block_size - 1) / g.block_size;
    if (nblocks > width)
      return invalid("block_table.shape[1] = " + s(width) + ": sequence " + s(i) + " with seq_len " +
                     s(slen) + " needs " + s(nblocks) + " blocks of " + s(g.block_size));
    for (std::int64_t j = 0; j < nblocks; ++j) {
      const std::int64_t id =
          bt[i * host.block_table.strides[0] + j * host.block_table.strides[1]];
      if (id < 0 || id >= g.num_blocks)
        return invalid("block_table[" + s(i) + "][" + s(j) + "] = " + s(id) +
                       ": expected a block id in [0, " + s(g.num_blocks) + ")");
    }
    if (qlen == 1) ++b.num_decode_seqs; else ++b.num_prefill_seqs;
    b.max_seq_len = std::max<int>(b.max_seq_len, static_cast<int>(slen));
    b.max_query_len = std::max<int>(b.max_query_len, static_cast<int>(qlen));
    b.total_kv_tokens += slen;
  }
  if (summary) *summary = b;
  return Status::Ok();
}

Status write_kv_args(const TensorView& key, const TensorView& value,
                     const TensorView& slot_mapping, const KVCache& cache,
                     const TensorView& host_slots, KVCacheGeometry* geometry) {
  auto geo = describe_kv_cache(cache);
  if (!geo.ok()) return geo.status();
  const KVCacheGeometry& g = *geo;
  const Device dev = cache.key.device;
  PAGEDATTN_RETURN_IF_ERROR(require_data(cache.key, "key_cache"));
  PAGEDATTN_RETURN_IF_ERROR(require_data(cache.value, "value_cache"));

  PAGEDATTN_RETURN_IF_ERROR(require_defined(slot_mapping, "slot_mapping"));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(slot_mapping, "slot_mapping", 1));
  PAGEDATTN_RETURN_IF_ERROR(require_index_dtype(slot_mapping, "slot_mapping"));
  PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(slot_mapping, "slot_mapping"));
  PAGEDATTN_RETURN_IF_ERROR(require_same_device(slot_mapping, "slot_mapping", dev));
  PAGEDATTN_RETURN_IF_ERROR(require_data(slot_mapping, "slot_mapping"));
  const std::int64_t num_tokens = slot_mapping.shape[0];

  for (const auto& [t, name] : {std::pair<const TensorView&, const char*>{key, "key"},
                                std::pair<const TensorView&, const char*>{value, "value"}}) {
    PAGEDATTN_RETURN_IF_ERROR(require_defined(t, name));
    PAGEDATTN_RETURN_IF_ERROR(require_ndim(t, name, 3));
    PAGEDATTN_RETURN_IF_ERROR(require_float_dtype(t, name));
    PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, 1, g.num_kv_heads));
    PAGEDATTN_RETURN_IF_ERROR(require_shape(t, name, 2, g.head_size));
    PAGEDATTN_RETURN_IF_ERROR(require_non_negative_strides(t, name));
    PAGEDATTN_RETURN_IF_ERROR(require_inner_contiguous(t, name));
    PAGEDATTN_RETURN_IF_ERROR(require_same_device(t, name, dev));
    PAGEDATTN_RETURN_IF_ERROR(require_data(t, name));
    if (t.shape[0] < num_tokens)
      return invalid(std::string(name) + ".shape[0] = " + s(t.shape[0]) +
                     ": fewer rows than slot_mapping's " + s(num_tokens) + " tokens");
    if (!is_fp8(g.dtype) && t.dtype != g.dtype)
      return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) +
                     ": expected the cache dtype " + to_string(g.dtype));
  }
  if (key.dtype != value.dtype)
    return invalid(std::string("value.dtype = ") + to_string(value.dtype) +
                   ": expected key.dtype " + to_string(key.dtype));
  for (const auto& [c, cname] : {std::pair<const TensorView&, const char*>{cache.key, "key_cache"},
                                 std::pair<const TensorView&, const char*>{cache.value, "value_cache"}}) {
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(c, cname, key, "key", false));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(c, cname, value, "value", false));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(c, cname, slot_mapping, "slot_mapping", false));
  }
  // Keys and values are stored separately: caches that share elements would have one
  // overwrite the other (attention only reads them and accepts any views).
  if (share_memory(cache.key, cache.value))
    return invalid("value_cache " + cache.value.describe() + " shares memory with key_cache " +
                   cache.key.describe() + ": write_kv would overwrite one with the other");

  if (host_slots.defined()) {
    PAGEDATTN_RETURN_IF_ERROR(require_ndim(host_slots, "host_slot_mapping", 1));
    PAGEDATTN_RETURN_IF_ERROR(require_dtype(host_slots, "host_slot_mapping", slot_mapping.dtype));
    PAGEDATTN_RETURN_IF_ERROR(require_shape(host_slots, "host_slot_mapping", 0, num_tokens));
    PAGEDATTN_RETURN_IF_ERROR(require_same_device(host_slots, "host_slot_mapping", Device::cpu()));
    PAGEDATTN_RETURN_IF_ERROR(require_data(host_slots, "host_slot_mapping"));
    const std::int64_t num_slots = g.num_slots();
    std::vector<std::pair<std::int64_t, std::int64_t>> used;  // (slot, token)
    used.reserve(static_cast<std::size_t>(num_tokens));
    for (std::int64_t i = 0; i < num_tokens; ++i) {
      const std::int64_t off = i * host_slots.strides[0];
      const std::int64_t slot = host_slots.dtype == DType::kInt32
                                    ? static_cast<const std::int32_t*>(host_slots.data)[off]
                                    : static_cast<const std::int64_t*>(host_slots.data)[off];
      if (slot < 0) continue;  // padding token
      if (slot >= num_slots)
        return invalid("slot_mapping[" + s(i) + "] = " + s(slot) + ": expected < " +
                       s(num_slots) + " slots (num_blocks " + s(g.num_blocks) + " x block_size " +
                       s(g.block_size) + "), or negative to skip");
      used.emplace_back(slot, i);
    }
    std::sort(used.begin(), used.end());
    for (std::size_t i = 1; i < used.size(); ++i) {
      if (used[i].first == used[i - 1].first)
        return invalid("slot_mapping[" + s(used[i - 1].second) + "] and slot_mapping[" +
                       s(used[i].second) + "] are both " + s(used[i].first) +
                       ": two tokens mapped to one slot");
    }
  }
  if (geometry) *geometry = g;
  return Status::Ok();
}

Status merge_args(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView& lse_out) {
  PAGEDATTN_RETURN_IF_ERROR(require_defined(out_a, "out_a"));
  PAGEDATTN_RETURN_IF_ERROR(require_ndim(out_a, "out_a", 3));
  PAGEDATTN_RETURN_IF_ERROR(require_float_dtype(out_a, "out_a"));
  const Device dev = out_a.device;
  const std::int64_t t = out_a.shape[0], h = out_a.shape[1], d = out_a.shape[2];
  // Kernels index heads and head dims with 32-bit integers.
  if (h > std::numeric_limits<std::int32_t>::max() || d > std::numeric_limits<std::int32_t>::max())
    return invalid("out_a " + out_a.describe() + ": num_heads or head_size exceeds int32");
  for (const auto& [v, name] : {std::pair<const TensorView&, const char*>{out_a, "out_a"},
                                std::pair<const TensorView&, const char*>{out_b, "out_b"},
                                std::pair<const TensorView&, const char*>{out, "out"}}) {
    PAGEDATTN_RETURN_IF_ERROR(require_float_tensor(v, name, {t, h, d}, dev, true));
    PAGEDATTN_RETURN_IF_ERROR(require_dtype(v, name, out_a.dtype));
  }
  PAGEDATTN_RETURN_IF_ERROR(require_non_overlapping(out, "out"));
  PAGEDATTN_RETURN_IF_ERROR(require_lse_tensor(lse_a, "lse_a", t, h, dev, true, false));
  PAGEDATTN_RETURN_IF_ERROR(require_lse_tensor(lse_b, "lse_b", t, h, dev, true, false));
  if (lse_out.defined())
    PAGEDATTN_RETURN_IF_ERROR(require_lse_tensor(lse_out, "lse_out", t, h, dev, true, true));
  // Each (token, head) row is read before it is written, so an output may be one of its own
  // inputs exactly; a partial overlap would read rows another row already overwrote.
  PAGEDATTN_RETURN_IF_ERROR(require_disjoint(out, "out", out_a, "out_a", true));
  PAGEDATTN_RETURN_IF_ERROR(require_disjoint(out, "out", out_b, "out_b", true));
  PAGEDATTN_RETURN_IF_ERROR(require_disjoint(out, "out", lse_a, "lse_a", false));
  PAGEDATTN_RETURN_IF_ERROR(require_disjoint(out, "out", lse_b, "lse_b", false));
  if (lse_out.defined()) {
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(lse_out, "lse_out", lse_a, "lse_a", true));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(lse_out, "lse_out", lse_b, "lse_b", true));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(lse_out, "lse_out", out_a, "out_a", false));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(lse_out, "lse_out", out_b, "out_b", false));
    PAGEDATTN_RETURN_IF_ERROR(require_disjoint(lse_out, "lse_out", out, "out", false));
  }
  return Status::Ok();
}

}  // namespace pagedattn::validate
