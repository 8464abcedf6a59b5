// Description of a paged KV cache: the three layouts, arbitrary block strides (padded pages of
// hybrid models), the element dtype and the fp8 scales.
#pragma once

#include <cstdint>
#include <string>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// Physical order of a cache block (DESIGN.md §1).
///  - kSplit (vLLM native): key `[num_blocks, num_kv_heads, head_size / x, block_size, x]` with
///    `x = 16 bytes / element size`, value `[num_blocks, num_kv_heads, head_size, block_size]`.
///  - kNHD: key and value `[num_blocks, block_size, num_kv_heads, head_size]`.
///  - kHND: key and value `[num_blocks, num_kv_heads, block_size, head_size]`.
enum class KVLayout : std::uint8_t { kSplit, kNHD, kHND };

/// "split", "nhd", "hnd".
const char* to_string(KVLayout layout);
/// Inverse of to_string(KVLayout); kInvalidArgument otherwise.
Result<KVLayout> parse_layout(const std::string& name);

/// The two cache tensors of one attention layer.
///
/// Shapes as KVLayout says. Every stride may be chosen freely (non-negative, in elements)
/// except the innermost one, which must be 1; in particular `stride(0)` (the block stride) may
/// exceed the size of one block (padded pages: K, V or Mamba state side by side in one page).
/// K and V must agree on num_blocks, block_size, num_kv_heads, head_size and dtype; their
/// strides may differ.
/// dtype: fp32, fp16, bf16 (then it must equal the query dtype), or fp8 e4m3/e5m2 with
/// `k_scale`/`v_scale`: the writer stores `fp8(x / k_scale)` and readers use
/// `float(stored) * k_scale` (DESIGN.md §2.6). The scales are ignored for non-fp8 caches.
/// With device scales (k_scales / v_scales below) the scale of KV head g is `k_scales[g]`
/// (`k_scales[0]` for every head when the tensor has one element) in both formulas.
struct KVCache {
  TensorView key;
  TensorView value;
  KVLayout layout = KVLayout::kNHD;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  /// Optional device-resident dequantisation scales of an fp8 cache: fp32, contiguous, shape
  /// `[1]` (per tensor) or `[num_kv_heads]` (per KV head, as calibrated checkpoints ship them),
  /// on the cache's device. When defined they replace k_scale / v_scale for the writer and
  /// every reader, and they are read by the kernels at run time, never on the host, so a CUDA
  /// graph replayed after the values changed uses the new values. Both or neither; only for fp8
  /// caches; values must be finite and > 0: run_attention and write_kv check them when they
  /// live on the host (kInvalidArgument naming the element, nothing written); GPU values are
  /// not checked.
  TensorView k_scales;
  TensorView v_scales;
};

/// Sizes read off a validated cache.
struct KVCacheGeometry {
  std::int64_t num_blocks = 0;
  std::int32_t block_size = 0;
  std::int32_t num_kv_heads = 0;
  std::int32_t head_size = 0;
  DType dtype = DType::kFloat16;
  /// Elements per 16 bytes (the `split` key's innermost extent); 0 for nhd/hnd.
  std::int32_t x = 0;
  /// Total cache slots: num_blocks * block_size.
  std::int64_t num_slots() const { return num_blocks * block_size; }
};

/// Check `cache` (shapes for its layout, dtypes, innermost strides, for fp8 caches scales > 0
/// and finite, no two elements at one address — blocks may be padded or interleaved but never
/// overlap — and offsets that fit 64-bit byte addressing) and return its sizes.
/// head_size: every multiple of 8 from 8 to 512 (DESIGN.md §1 asks for 32..256; 512 for
/// Gemma-4's global layers); `split` additionally needs head_size % x == 0 (so fp8 `split`
/// caches need a multiple of 16). Device scales (k_scales / v_scales): both or neither, fp8
/// caches only, fp32, contiguous, shape [1] or [num_kv_heads], on the cache's device, data
/// not null (their values are not read).
/// Errors: kInvalidArgument naming "key_cache"/"value_cache" and the offending dimension, or
/// "k_scales"/"v_scales"; kUnsupported for head sizes or dtypes outside the supported set.
Result<KVCacheGeometry> describe_kv_cache(const KVCache& cache);

/// DESIGN.md §1 "block-contiguous": `stride(0) == product(shape[1:])` for both K and V and the
/// blocks are dense inside. The native fast paths may assume it; the general path must not.
bool is_block_contiguous(const KVCache& cache);

/// How readers and writers address a cache. The single layout decision that both the writer
/// (write_kv) and the reader (attention) take, so that they can never disagree.
enum class CacheAccess : std::uint8_t {
  /// Dense blocks with compile-time in-block offsets (fast paths).
  kNative,
  /// Every offset from the tensors' strides (padded pages, exotic strides).
  kStrided,
};
struct CacheAccessDecision {
  CacheAccess access = CacheAccess::kStrided;
  std::string reason;
};
/// kNative iff is_block_contiguous(cache) and both tensors are dense inside a block;
/// otherwise kStrided, with the reason in words.
CacheAccessDecision decide_cache_access(const KVCache& cache);

/// What to allocate for a cache. `page_pad` extra elements follow each block of K and of V,
/// so that `stride(0) = elements_per_block + page_pad` (DESIGN.md §7 `--page-pad`).
struct KVCacheSpec {
  KVLayout layout = KVLayout::kNHD;
  std::int64_t num_blocks = 0;
  std::int32_t block_size = 16;
  std::int32_t num_kv_heads = 1;
  std::int32_t head_size = 128;
  DType dtype = DType::kFloat16;
  std::int64_t page_pad = 0;
};

/// Elements one block of K (or V) holds, without padding: block_size * num_kv_heads * head_size.
std::int64_t kv_block_elements(const KVCacheSpec& spec);
/// Elements to allocate for each of K and V: num_blocks * (kv_block_elements + page_pad).
/// Errors: kInvalidArgument for non-positive sizes, negative padding, or overflow of int64.
Result<std::int64_t> kv_cache_elements(const KVCacheSpec& spec);
/// Views over caller-allocated K and V memory (each kv_cache_elements(spec) elements) laid out
/// as `spec` says, then checked with describe_kv_cache. Errors as describe_kv_cache.
Result<KVCache> make_kv_cache(const KVCacheSpec& spec, void* key_data, void* value_data,
                              Device device = Device::cpu(), float k_scale = 1.0f,
                              float v_scale = 1.0f);

}  // namespace pagedattn
