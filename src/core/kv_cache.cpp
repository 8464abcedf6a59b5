#include "pagedattn/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "src/core/validate.h"

namespace pagedattn {

const char* to_string(KVLayout layout) {
  switch (layout) {
    case KVLayout::kSplit: return "split";
    case KVLayout::kNHD: return "nhd";
    case KVLayout::kHND: return "hnd";
  }
  return "unknown";
}

Result<KVLayout> parse_layout(const std::string& name) {
  for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
    if (name == to_string(l)) return l;
  }
  return Status(StatusCode::kInvalidArgument,
                "layout '" + name + "': expected one of split, nhd, hnd");
}

namespace {

using validate::invalid;
using validate::unsupported;

std::string dim_str(const char* name, int d, std::int64_t got, std::int64_t want) {
  return std::string(name) + ".shape[" + std::to_string(d) + "] = " + std::to_string(got) +
         ": expected " + std::to_string(want);
}

/// The largest element offset + 1 fits in int64 and its byte size in int64 too, so that every
/// offset a kernel forms (block id x block stride + ...) is representable.
bool span_fits(const TensorView& t) {
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() /
                           static_cast<std::int64_t>(std::max<std::size_t>(1, dtype_size(t.dtype)));
  std::int64_t span = 1;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] <= 1) continue;
    if (t.strides[d] > 0 && (t.shape[d] - 1) > (max - span) / t.strides[d]) return false;
    span += (t.shape[d] - 1) * t.strides[d];
  }
  return true;
}

Status check_cache_tensor(const TensorView& t, const char* name, int ndim) {
  PAGEDATTN_RETURN_IF_ERROR(validate::require_defined(t, name));
  PAGEDATTN_RETURN_IF_ERROR(validate::require_ndim(t, name, ndim));
  for (int d = 0; d < ndim; ++d) {
    if (t.shape[d] <= 0)
      return invalid(std::string(name) + ".shape[" + std::to_string(d) + "] = " +
                     std::to_string(t.shape[d]) + ": expected > 0");
  }
  PAGEDATTN_RETURN_IF_ERROR(validate::require_non_negative_strides(t, name));
  PAGEDATTN_RETURN_IF_ERROR(validate::require_inner_contiguous(t, name));
  if (!span_fits(t))
    return invalid(std::string(name) + " " + t.describe() +
                   ": the largest element offset overflows 64-bit byte addressing");
  if (!validate::non_overlapping(t))
    return invalid(std::string(name) + " " + t.describe() +
                   ": blocks or elements overlap (stride(0) must be at least the span of one "
                   "block)");
  if (!(t.dtype == DType::kFloat32 || t.dtype == DType::kFloat16 ||
        t.dtype == DType::kBFloat16 || is_fp8(t.dtype)))
    return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) +
                   ": expected fp32, fp16, bf16, fp8_e4m3 or fp8_e5m2");
  return Status::Ok();
}

/// KVCache::k_scales / v_scales: both or neither, fp8 caches only, fp32 `[1]` or
/// `[num_kv_heads]`, contiguous, on the cache's device. Their values are not read (they may
/// live on the GPU); readers and writers take them in place of k_scale / v_scale.
Status check_scale_tensors(const KVCache& cache, const KVCacheGeometry& g) {
  const TensorView& ks = cache.k_scales;
  const TensorView& vs = cache.v_scales;
  if (!ks.defined() && !vs.defined()) return Status::Ok();
  if (ks.defined() != vs.defined())
    return invalid(std::string(ks.defined() ? "v_scales" : "k_scales") +
                   ": not given while " + (ks.defined() ? "k_scales" : "v_scales") +
                   " is: device scales come as a pair (both or neither)");
  for (const auto& [t, name] : {std::pair<const TensorView&, const char*>{ks, "k_scales"},
                                std::pair<const TensorView&, const char*>{vs, "v_scales"}}) {
    if (!is_fp8(g.dtype))
      return invalid(std::string(name) + ": scale tensors apply to fp8 caches only; the cache "
                     "dtype is " + to_string(g.dtype));
    if (t.dtype != DType::kFloat32)
      return invalid(std::string(name) + ".dtype = " + to_string(t.dtype) + ": expected fp32");
    if (t.ndim != 1 || (t.shape[0] != 1 && t.shape[0] != g.num_kv_heads))
      return invalid(std::string(name) + " " + t.describe() + ": expected shape [1] (per tensor) "
                     "or [" + std::to_string(g.num_kv_heads) + "] (num_kv_heads, per KV head)");
    if (!t.is_contiguous())
      return invalid(std::string(name) + " " + t.describe() + ": expected a contiguous tensor");
    if (t.device != cache.key.device)
      return invalid(std::string(name) + ".device = " + to_string(t.device) +
                     ": expected the cache's device " + to_string(cache.key.device));
    if (t.data == nullptr) return invalid(std::string(name) + ".data is null");
  }
  if (ks.shape[0] != vs.shape[0])
    return invalid("v_scales " + vs.describe() + ": expected the shape of k_scales " +
                   ks.describe());
  return Status::Ok();
}

}  // namespace

Result<KVCacheGeometry> describe_kv_cache(const KVCache& cache) {
  const TensorView& k = cache.key;
  const TensorView& v = cache.value;
  const bool split = cache.layout == KVLayout::kSplit;
  PAGEDATTN_RETURN_IF_ERROR(check_cache_tensor(k, "key_cache", split ? 5 : 4));
  PAGEDATTN_RETURN_IF_ERROR(check_cache_tensor(v, "value_cache", 4));
  if (k.dtype != v.dtype)
    return invalid(std::string("value_cache.dtype = ") + to_string(v.dtype) +
                   ": expected key_cache.dtype " + to_string(k.dtype));
  if (k.device != v.device)
    return invalid("value_cache.device = " + to_string(v.device) + ": expected key_cache.device " +
                   to_string(k.device));

  // Kernels hold per-block dimensions (heads, head size, block size) in 32-bit integers;
  // checked before any of them is narrowed.
  if (k.shape[1] > std::numeric_limits<std::int32_t>::max() ||
      k.shape[2] > std::numeric_limits<std::int32_t>::max() ||
      k.shape[3] > std::numeric_limits<std::int32_t>::max())
    return invalid("key_cache " + k.describe() + ": a per-block dimension exceeds int32");

  KVCacheGeometry g;
  g.dtype = k.dtype;
  g.num_blocks = k.shape[0];
  // The value cache has the key's first four dimensions, except that the split layout's head
  // dimension is the key's chunk count times x. The head size stays in 64 bits until its range
  // is checked (the split product may exceed int32).
  std::int64_t want_v[4] = {k.shape[0], k.shape[1], k.shape[2], k.shape[3]};
  std::int64_t head_size = 0;
  switch (cache.layout) {
    case KVLayout::kSplit: {
      g.x = static_cast<std::int32_t>(16 / dtype_size(k.dtype));
      if (k.shape[4] != g.x)
        return invalid(dim_str("key_cache", 4, k.shape[4], g.x) +
                       " (x = 16 bytes / element size for the split layout)");
      g.num_kv_heads = static_cast<std::int32_t>(k.shape[1]);
      head_size = k.shape[2] * g.x;  // < 2^35: no overflow in 64 bits
      g.block_size = static_cast<std::int32_t>(k.shape[3]);
      want_v[2] = head_size;
      break;
    }
    case KVLayout::kNHD:
    case KVLayout::kHND: {
      const bool nhd = cache.layout == KVLayout::kNHD;
      g.block_size = static_cast<std::int32_t>(k.shape[nhd ? 1 : 2]);
      g.num_kv_heads = static_cast<std::int32_t>(k.shape[nhd ? 2 : 1]);
      head_size = k.shape[3];
      break;
    }
    default: return invalid("cache.layout: unknown layout value");
  }
  if (head_size % 8 != 0 || head_size < 8 || head_size > 512)
    return unsupported("head_size = " + std::to_string(head_size) +
                       ": supported head sizes are the multiples of 8 from 8 to 512");
  g.head_size = static_cast<std::int32_t>(head_size);
  for (int d = 0; d < 4; ++d)
    if (v.shape[d] != want_v[d]) return invalid(dim_str("value_cache", d, v.shape[d], want_v[d]));
  if (is_fp8(g.dtype)) {
    if (!(std::isfinite(cache.k_scale) && cache.k_scale > 0))
      return invalid("k_scale = " + std::to_string(cache.k_scale) +
                     ": expected a finite value > 0 for an fp8 cache");
    if (!(std::isfinite(cache.v_scale) && cache.v_scale > 0))
      return invalid("v_scale = " + std::to_string(cache.v_scale) +
                     ": expected a finite value > 0 for an fp8 cache");
  }
  PAGEDATTN_RETURN_IF_ERROR(check_scale_tensors(cache, g));
  return g;
}

bool is_block_contiguous(const KVCache& cache) {
  auto packed = [](const TensorView& t) {
    if (!t.defined()) return false;
    std::int64_t inner = 1;
    for (int d = 1; d < t.ndim; ++d) inner *= t.shape[d];
    return t.shape[0] == 1 || t.strides[0] == inner;
  };
  return packed(cache.key) && packed(cache.value);
}

CacheAccessDecision decide_cache_access(const KVCache& cache) {
  CacheAccessDecision d;
  if (!is_block_contiguous(cache)) {
    d.access = CacheAccess::kStrided;
    d.reason = "block stride differs from the block size (padded pages or interleaved "
               "blocks): every offset from the tensors' strides";
    return d;
  }
  if (!cache.key.is_contiguous() || !cache.value.is_contiguous()) {
    d.access = CacheAccess::kStrided;
    d.reason = "blocks are packed but not dense inside (permuted strides): strided addressing";
    return d;
  }
  d.access = CacheAccess::kNative;
  d.reason = std::string("dense block-contiguous ") + to_string(cache.layout) +
             " cache: compile-time in-block offsets";
  return d;
}

std::int64_t kv_block_elements(const KVCacheSpec& spec) {
  return static_cast<std::int64_t>(spec.block_size) * spec.num_kv_heads * spec.head_size;
}

Result<std::int64_t> kv_cache_elements(const KVCacheSpec& spec) {
  if (spec.num_blocks <= 0) return invalid("num_blocks = " + std::to_string(spec.num_blocks) + ": expected > 0");
  if (spec.block_size <= 0) return invalid("block_size = " + std::to_string(spec.block_size) + ": expected > 0");
  if (spec.num_kv_heads <= 0) return invalid("num_kv_heads = " + std::to_string(spec.num_kv_heads) + ": expected > 0");
  if (spec.head_size <= 0) return invalid("head_size = " + std::to_string(spec.head_size) + ": expected > 0");
  if (spec.page_pad < 0) return invalid("page_pad = " + std::to_string(spec.page_pad) + ": expected >= 0");
  // Every product and sum in int64 bytes, checked before it is formed.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max() / 8;
  const std::int64_t bh = static_cast<std::int64_t>(spec.block_size) * spec.num_kv_heads;
  if (bh > max / spec.head_size)
    return invalid("block_size x num_kv_heads x head_size overflows 64-bit addressing");
  const std::int64_t block = bh * spec.head_size;
  if (spec.page_pad > max - block)
    return invalid("page_pad = " + std::to_string(spec.page_pad) +
                   ": block elements + page_pad overflows 64-bit addressing");
  const std::int64_t per_block = block + spec.page_pad;
  if (per_block > max / spec.num_blocks)
    return invalid("num_blocks = " + std::to_string(spec.num_blocks) + " x " +
                   std::to_string(per_block) + " elements per block overflows 64-bit addressing");
  return per_block * spec.num_blocks;
}

Result<KVCache> make_kv_cache(const KVCacheSpec& spec, void* key_data, void* value_data,
                              Device device, float k_scale, float v_scale) {
  auto elems = kv_cache_elements(spec);
  if (!elems.ok()) return elems.status();
  const std::int64_t nb = spec.num_blocks, bs = spec.block_size, h = spec.num_kv_heads,
                     d = spec.head_size;
  const std::int64_t block_stride = kv_block_elements(spec) + spec.page_pad;
  KVCache c;
  c.layout = spec.layout;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  switch (spec.layout) {
    case KVLayout::kSplit: {
      const std::int64_t x = 16 / static_cast<std::int64_t>(dtype_size(spec.dtype));
      if (d % x != 0)
        return unsupported("head_size = " + std::to_string(d) + ": the split layout needs "
                           "head_size % x == 0 with x = " + std::to_string(x) + " for " +
                           to_string(spec.dtype));
      c.key = TensorView::strided(key_data, spec.dtype, {nb, h, d / x, bs, x},
                                  {block_stride, d * bs, bs * x, x, 1}, device);
      c.value = TensorView::strided(value_data, spec.dtype, {nb, h, d, bs},
                                    {block_stride, d * bs, bs, 1}, device);
      break;
    }
    case KVLayout::kNHD:
      c.key = TensorView::strided(key_data, spec.dtype, {nb, bs, h, d},
                                  {block_stride, h * d, d, 1}, device);
      c.value = TensorView::strided(value_data, spec.dtype, {nb, bs, h, d},
                                    {block_stride, h * d, d, 1}, device);
      break;
    case KVLayout::kHND:
      c.key = TensorView::strided(key_data, spec.dtype, {nb, h, bs, d},
                                  {block_stride, bs * d, d, 1}, device);
      c.value = TensorView::strided(value_data, spec.dtype, {nb, h, bs, d},
                                    {block_stride, bs * d, d, 1}, device);
      break;
  }
  auto g = describe_kv_cache(c);
  if (!g.ok()) return g.status();
  return c;
}

}  // namespace pagedattn
