// The CPU backend: a tiled online-softmax implementation, deliberately a different code from
// the oracle in reference.cpp. Arguments arrive validated.
#pragma once

#include <vector>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "src/core/internal.h"

namespace pagedattn::cpu {

/// Tokens per tile for the CPU path: chosen from head_size and the cache element size so that
/// one K and one V tile stay in a core's L1/L2, never from block_size.
int choose_tile_tokens(int head_size, DType cache_dtype);

/// The dequantisation scale of every KV head of `cache` (validated, on the CPU): the values of
/// k_scales / v_scales (`key` picks which) when defined (one value repeated for a `[1]`
/// tensor), else k_scale / v_scale; all 1 for a non-fp8 cache.
std::vector<float> head_scales(const KVCache& cache, const KVCacheGeometry& geometry, bool key);

/// Build the plan's work list (longest work first).
void build_work_list(const AttentionArgs& args, const HostMetadata& host,
                     AttentionPlan::State* state);

/// Run attention on CPU tensors.
Status run_attention(const AttentionPlan::State& plan, const AttentionArgs& args);

/// Write K/V into a CPU cache (slots already validated).
Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, const KVCacheGeometry& geometry);

/// Merge two attention states on the CPU (arguments validated).
Status merge_attention_states(const TensorView& out_a, const TensorView& lse_a,
                              const TensorView& out_b, const TensorView& lse_b,
                              const TensorView& out, const TensorView& lse_out);

}  // namespace pagedattn::cpu
