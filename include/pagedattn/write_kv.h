// Writing new tokens' keys and values into the paged cache through a slot mapping.
#pragma once

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// Optional inputs of write_kv.
struct WriteKVOptions {
  /// Host copy of `slot_mapping` (same length and dtype) for callers whose slot_mapping lives
  /// on the GPU: its values are validated before any launch. Absent: GPU kernels still skip
  /// out-of-range slots (memory-safe) but cannot report them.
  TensorView host_slot_mapping;
};

/// Store key/value rows into `cache` (vLLM's reshape_and_cache / reshape_and_cache_flash).
///
/// key, value: `[>= num_tokens, num_kv_heads, head_size]`, fp32/fp16/bf16; last dim
///   contiguous, other strides free. Equal to the cache dtype, or any of the three when the
///   cache is fp8. Extra rows past num_tokens (CUDA-graph padding) are ignored.
/// slot_mapping: `[num_tokens]` int32 or int64; num_tokens is its length (never key's).
///   `slot = block_id * block_size + offset`. A negative slot means "skip" (padding).
/// fp8 caches store `fp8(x / k_scale)` (round to nearest even, saturating; DESIGN.md §2.6, §2.8),
/// with the scale of the row's KV head read from KVCache::k_scales / v_scales when the cache
/// has them (on the device, at run time: a captured graph uses the tensors' current values).
/// Errors (nothing is written when any is returned): kInvalidArgument for shape/dtype/device
/// mismatches, a slot >= num_blocks * block_size, two tokens mapped to one slot (named by
/// index), key/value/slot_mapping sharing memory with the cache, or key and value caches
/// sharing elements (one would overwrite the other; nhd/hnd K and V pages interleaved in one
/// buffer share none and are fine; split-layout caches must not share a span);
/// kDeviceUnavailable for CUDA tensors in a build or machine without CUDA.
Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, Stream stream = nullptr, const WriteKVOptions& options = {});

}  // namespace pagedattn
