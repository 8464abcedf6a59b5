// The oracle (DESIGN.md §4): a literal transcription of the math of DESIGN.md §2. Every element
// is addressed by spelling out its index in every dimension and summing index * stride, every
// key is fetched on its own through the block table, and all arithmetic is in double. It shares
// nothing with the CPU backend (cpu_attention.cpp, cpu_write_kv.cpp) beyond numeric.h, the
// storage-format conversions that DESIGN.md §2.8 requires every backend to share.
#include "pagedattn/reference.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "src/core/numeric.h"
#include "src/core/validate.h"

namespace pagedattn {
namespace {

bool on_cpu(const TensorView& t) { return !t.defined() || t.device.type == DeviceType::kCPU; }

/// Offset of the element with indices `idx` (one per dimension of `t`).
std::int64_t offset_of(const TensorView& t, std::initializer_list<std::int64_t> idx) {
  std::int64_t off = 0;
  int k = 0;
  for (std::int64_t i : idx) off += i * t.strides[k++];
  return off;
}

std::int64_t load_index(const TensorView& t, std::initializer_list<std::int64_t> idx) {
  const std::int64_t off = offset_of(t, idx);
  if (t.dtype == DType::kInt64) return static_cast<const std::int64_t*>(t.data)[off];
  return static_cast<const std::int32_t*>(t.data)[off];
}

double load_float(const TensorView& t, std::initializer_list<std::int64_t> idx) {
  return static_cast<double>(numeric::load_as_float(t.data, t.dtype, offset_of(t, idx)));
}

/// Offset of element (block b, KV head g, token-in-block t, dim d) of a key cache tensor.
std::int64_t key_offset(const TensorView& k, KVLayout layout, std::int64_t x, std::int64_t b,
                        std::int64_t g, std::int64_t t, std::int64_t d) {
  switch (layout) {
    case KVLayout::kSplit: return offset_of(k, {b, g, d / x, t, d % x});
    case KVLayout::kNHD: return offset_of(k, {b, t, g, d});
    case KVLayout::kHND: return offset_of(k, {b, g, t, d});
  }
  return 0;
}

/// Same for a value cache tensor (the split layout's value is [b, g, d, t]).
std::int64_t value_offset(const TensorView& v, KVLayout layout, std::int64_t b, std::int64_t g,
                          std::int64_t t, std::int64_t d) {
  switch (layout) {
    case KVLayout::kSplit: return offset_of(v, {b, g, d, t});
    case KVLayout::kNHD: return offset_of(v, {b, t, g, d});
    case KVLayout::kHND: return offset_of(v, {b, g, t, d});
  }
  return 0;
}

/// Dequantised cache element: float(stored) * scale for fp8, the stored value otherwise.
double load_cache(const TensorView& c, std::int64_t off, float scale) {
  const double stored = static_cast<double>(numeric::load_as_float(c.data, c.dtype, off));
  return is_fp8(c.dtype) ? stored * static_cast<double>(scale) : stored;
}

/// The scale of KV head `g`: element g of the device-scale tensor (element 0 of a `[1]`
/// tensor) when the cache has one, else the scalar (DESIGN.md §2.6).
float head_scale(const TensorView& scales, float scalar, std::int64_t g) {
  if (!scales.defined()) return scalar;
  return static_cast<const float*>(scales.data)[(scales.shape[0] > 1 ? g : 0) * scales.strides[0]];
}

/// `v` rounded to float with round-to-odd. Rounding that float once more to a format with at
/// least two fewer significand bits (fp16, bf16) gives the same result as rounding `v` to that
/// format directly, so the oracle's output is rounded exactly once whatever the out dtype.
float round_to_odd_float(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) {
    f = std::nextafter(f, 0.0f);  // the float nearer to zero: v truncated
  }
  return numeric::bits_float(numeric::float_bits(f) | 1u);
}

void store_out(const TensorView& out, std::int64_t off, double v) {
  if (out.dtype == DType::kFloat32) {
    static_cast<float*>(out.data)[off] = static_cast<float>(v);
  } else {
    numeric::store_from_float(out.data, out.dtype, off, round_to_odd_float(v));
  }
}

Status require_cpu(std::initializer_list<const TensorView*> views, const char* what) {
  for (const TensorView* t : views) {
    if (!on_cpu(*t)) return validate::invalid(std::string(what) + ": tensors must be on the CPU");
  }
  return Status::Ok();
}

}  // namespace

Status reference_attention(const AttentionArgs& args) {
  // The oracle accepts any float out dtype (tests compare in fp32), so the out dtype is checked
  // here and the shared rules see an out of the query dtype.
  PAGEDATTN_RETURN_IF_ERROR(validate::require_float_dtype(args.out, "out"));
  AttentionArgs checked = args;
  checked.out.dtype = args.query.dtype;
  KVCacheGeometry geo;
  PAGEDATTN_RETURN_IF_ERROR(validate::attention_args(checked, /*need_data=*/true, &geo));
  // Metadata values are read below, which is only possible for host memory.
  PAGEDATTN_RETURN_IF_ERROR(require_cpu(
      {&args.query, &args.cache.key, &args.cache.value, &args.block_table, &args.seq_lens,
       &args.query_start_loc, &args.out, &args.lse, &args.params.alibi_slopes, &args.params.sinks,
       &args.cache.k_scales, &args.cache.v_scales},
      "reference_attention"));
  BatchSummary summary;
  PAGEDATTN_RETURN_IF_ERROR(
      validate::host_metadata(checked, HostMetadata::from_args(checked), geo, &summary));

  const AttentionArgs& a = args;
  const TensorView& kc = a.cache.key;
  const TensorView& vc = a.cache.value;
  const std::int64_t num_seqs = a.seq_lens.size(0);
  const std::int64_t num_heads = a.query.size(1);
  const std::int64_t head_size = geo.head_size;
  const std::int64_t group = num_heads / geo.num_kv_heads;
  const std::int64_t block_size = geo.block_size;
  const double scale = a.params.scale;
  const double softcap = a.params.softcap;
  const std::int64_t window = a.params.sliding_window;

  std::vector<double> q(static_cast<std::size_t>(head_size));
  std::vector<double> z;
  std::vector<std::int64_t> keys;
  std::vector<double> acc(static_cast<std::size_t>(head_size));
  // An element's offset is linear in its indices, so (block, head, token) and the dim add up:
  // the dims' parts once, not per key (a soak's oracle rows attend 126k keys).
  std::vector<std::int64_t> k_dim(static_cast<std::size_t>(head_size));
  std::vector<std::int64_t> v_dim(static_cast<std::size_t>(head_size));
  for (std::int64_t d = 0; d < head_size; ++d) {
    k_dim[d] = key_offset(kc, a.cache.layout, geo.x, 0, 0, 0, d);
    v_dim[d] = value_offset(vc, a.cache.layout, 0, 0, 0, d);
  }

  for (std::int64_t s = 0; s < num_seqs; ++s) {
    const std::int64_t q_begin = load_index(a.query_start_loc, {s});
    const std::int64_t q_end = load_index(a.query_start_loc, {s + 1});
    const std::int64_t query_len = q_end - q_begin;
    if (query_len == 0) continue;  // no rows: reads nothing, writes nothing (DESIGN.md §2.7)
    const std::int64_t seq_len = load_index(a.seq_lens, {s});
    const std::int64_t context_len = seq_len - query_len;

    for (std::int64_t i = 0; i < query_len; ++i) {
      const std::int64_t token = q_begin + i;
      const std::int64_t q_pos = context_len + i;
      for (std::int64_t h = 0; h < num_heads; ++h) {
        const std::int64_t g = h / group;
        for (std::int64_t d = 0; d < head_size; ++d) q[d] = load_float(a.query, {token, h, d});
        const float k_scale = head_scale(a.cache.k_scales, a.cache.k_scale, g);
        const float v_scale = head_scale(a.cache.v_scales, a.cache.v_scale, g);

        // Logits of the keys this row may see (causal, then window), in key order.
        keys.clear();
        z.clear();
        for (std::int64_t j = 0; j <= q_pos; ++j) {
          if (window > 0 && q_pos - j >= window) continue;
          const std::int64_t b = load_index(a.block_table, {s, j / block_size});
          const std::int64_t t = j % block_size;
          const std::int64_t base = key_offset(kc, a.cache.layout, geo.x, b, g, t, 0);
          double dot = 0.0;
          for (std::int64_t d = 0; d < head_size; ++d) {
            dot += q[d] * load_cache(kc, base + k_dim[d], k_scale);
          }
          double zj = scale * dot;
          if (softcap > 0.0) zj = softcap * std::tanh(zj / softcap);
          if (a.params.alibi_slopes.defined()) {
            zj += load_float(a.params.alibi_slopes, {h}) * static_cast<double>(j - q_pos);
          }
          keys.push_back(j);
          z.push_back(zj);
        }

        // Two-pass softmax: the max first, then the exponentials relative to it.
        const bool has_sink = a.params.sinks.defined();
        const double sink = has_sink ? load_float(a.params.sinks, {h})
                                     : -std::numeric_limits<double>::infinity();
        double m = sink;
        for (double zj : z) m = std::fmax(m, zj);
        double denom = has_sink ? std::exp(sink - m) : 0.0;
        for (double zj : z) denom += std::exp(zj - m);

        for (double& v : acc) v = 0.0;
        for (std::size_t k = 0; k < keys.size(); ++k) {
          const std::int64_t j = keys[k];
          const std::int64_t b = load_index(a.block_table, {s, j / block_size});
          const std::int64_t t = j % block_size;
          const double p = std::exp(z[k] - m);
          const std::int64_t base = value_offset(vc, a.cache.layout, b, g, t, 0);
          for (std::int64_t d = 0; d < head_size; ++d) {
            acc[d] += p * load_cache(vc, base + v_dim[d], v_scale);
          }
        }
        for (std::int64_t d = 0; d < head_size; ++d) {
          store_out(a.out, offset_of(a.out, {token, h, d}), acc[d] / denom);
        }
        if (a.lse.defined()) {
          static_cast<float*>(a.lse.data)[offset_of(a.lse, {token, h})] =
              static_cast<float>(m + std::log(denom));
        }
      }
    }
  }
  return Status::Ok();
}

Status reference_write_kv(const TensorView& key, const TensorView& value,
                          const TensorView& slot_mapping, const KVCache& cache) {
  KVCacheGeometry geo;
  // Shapes first; the slot values are read (host_slots) only once they are known to be on the
  // CPU.
  PAGEDATTN_RETURN_IF_ERROR(
      validate::write_kv_args(key, value, slot_mapping, cache, TensorView{}, &geo));
  PAGEDATTN_RETURN_IF_ERROR(
      require_cpu({&key, &value, &slot_mapping, &cache.key, &cache.value, &cache.k_scales,
                   &cache.v_scales},
                  "reference_write_kv"));
  PAGEDATTN_RETURN_IF_ERROR(
      validate::write_kv_args(key, value, slot_mapping, cache, slot_mapping, &geo));

  const std::int64_t num_tokens = slot_mapping.size(0);
  const std::int64_t block_size = geo.block_size;
  const bool fp8 = is_fp8(geo.dtype);
  const std::size_t elem = dtype_size(geo.dtype);

  // Write one element: fp8 caches get fp8(x / scale) with x the input value; other caches get
  // the input's bits unchanged (the dtypes are equal).
  auto put = [&](const TensorView& src, std::int64_t src_off, const TensorView& dst,
                 std::int64_t dst_off, float scale) {
    if (fp8) {
      const float x = numeric::load_as_float(src.data, src.dtype, src_off);
      const float q = x / scale;
      auto* d = static_cast<std::uint8_t*>(dst.data) + dst_off;
      *d = geo.dtype == DType::kFloat8E4M3 ? numeric::float_to_e4m3(q) : numeric::float_to_e5m2(q);
    } else {
      std::memcpy(static_cast<char*>(dst.data) + dst_off * static_cast<std::int64_t>(elem),
                  static_cast<const char*>(src.data) + src_off * static_cast<std::int64_t>(elem),
                  elem);
    }
  };

  for (std::int64_t i = 0; i < num_tokens; ++i) {
    const std::int64_t slot = load_index(slot_mapping, {i});
    if (slot < 0) continue;  // padding
    const std::int64_t b = slot / block_size;
    const std::int64_t t = slot % block_size;
    for (std::int64_t g = 0; g < geo.num_kv_heads; ++g) {
      for (std::int64_t d = 0; d < geo.head_size; ++d) {
        put(key, offset_of(key, {i, g, d}), cache.key,
            key_offset(cache.key, cache.layout, geo.x, b, g, t, d),
            head_scale(cache.k_scales, cache.k_scale, g));
        put(value, offset_of(value, {i, g, d}), cache.value,
            value_offset(cache.value, cache.layout, b, g, t, d),
            head_scale(cache.v_scales, cache.v_scale, g));
      }
    }
  }
  return Status::Ok();
}

}  // namespace pagedattn
