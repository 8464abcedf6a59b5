// Validation of public arguments: one helper per rule, each returning a Status whose message
// names the argument, the expectation and what was found. Nothing here touches device memory.
#pragma once

#include <cstdint>
#include <string>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn::validate {

Status invalid(const std::string& message);
Status unsupported(const std::string& message);

// ---- generic tensor rules ----
Status require_defined(const TensorView& t, const char* name);
Status require_ndim(const TensorView& t, const char* name, int ndim);
Status require_dtype(const TensorView& t, const char* name, DType dtype);
Status require_float_dtype(const TensorView& t, const char* name);  // fp32/fp16/bf16
Status require_index_dtype(const TensorView& t, const char* name);  // int32/int64
Status require_shape(const TensorView& t, const char* name, int dim, std::int64_t expected);
Status require_non_negative_strides(const TensorView& t, const char* name);
Status require_inner_contiguous(const TensorView& t, const char* name);
Status require_same_device(const TensorView& t, const char* name, const Device& device);
Status require_data(const TensorView& t, const char* name);
Status require_contiguous(const TensorView& t, const char* name);
/// No two indices of `t` address the same element (strides sorted ascending, each at least the
/// span of the dimensions below it): required of every tensor a call writes, so that no two
/// results race for one element.
bool non_overlapping(const TensorView& t);
Status require_non_overlapping(const TensorView& t, const char* name);
/// Same data pointer, dtype, shape and strides (of the dimensions longer than 1).
bool same_view(const TensorView& a, const TensorView& b);
/// Whether some element of `a` and some element of `b` can share a byte (same device, both
/// with data). Exact for two views of one geometry where `a` is non-overlapping (e.g. two
/// tensors interleaved in one packed buffer); conservative (true) otherwise once their byte
/// spans meet.
bool share_memory(const TensorView& a, const TensorView& b);
/// kInvalidArgument naming both tensors when `written` shares memory with `other`, unless
/// `exact_alias_ok` and they are the same view (in-place use where each row is read before
/// it is written).
Status require_disjoint(const TensorView& written, const char* written_name,
                        const TensorView& other, const char* other_name, bool exact_alias_ok);

// ---- attention ----
/// Shapes, dtypes, strides and devices of every tensor in `args`, and the scalar params.
/// Fills `geometry` with the cache's sizes. `need_data`: data pointers must be non-null.
Status attention_args(const AttentionArgs& args, bool need_data, KVCacheGeometry* geometry);
/// Values of the host metadata against `args` (shapes equal, values consistent, block ids in
/// range) and the batch summary.
Status host_metadata(const AttentionArgs& args, const HostMetadata& host,
                     const KVCacheGeometry& geometry, BatchSummary* summary);

/// Values of the per-head parameter tensors that live on the host (a CPU call's tensors;
/// device tensors are read only by the kernels, so a host check would need a synchronisation
/// and would miss a CUDA graph replayed with new values): alibi_slopes finite, sinks finite or
/// -inf, and for fp8 caches k_scales / v_scales finite and > 0 (the rule of k_scale /
/// v_scale). Run-time checks: the values may change between plan and run.
/// Errors: kInvalidArgument naming the tensor, the index and the value.
Status host_parameter_values(const AttentionParams& params, const KVCache& cache,
                             const KVCacheGeometry& geometry);
/// The k_scales / v_scales half of host_parameter_values (the writer divides by them).
Status host_scale_values(const KVCache& cache, const KVCacheGeometry& geometry);

// ---- write_kv ----
/// Shapes, dtypes, devices; and, when `slots` (a host view of the slot mapping) is defined,
/// every slot value (< num_slots, no duplicates among non-negative slots).
Status write_kv_args(const TensorView& key, const TensorView& value,
                     const TensorView& slot_mapping, const KVCache& cache,
                     const TensorView& host_slots, KVCacheGeometry* geometry);

// ---- merge ----
Status merge_args(const TensorView& out_a, const TensorView& lse_a, const TensorView& out_b,
                  const TensorView& lse_b, const TensorView& out, const TensorView& lse_out);

}  // namespace pagedattn::validate
