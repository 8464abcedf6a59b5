// Kernel parameters of the CUDA tiled attention kernel. Plain data, no CUDA types, so that the
// host launcher fills it and host unit tests can reason about it. The fields every attention
// kernel has carry the names of the MMA kernels' structs (fill_attention_params,
// launch_args.h).
#pragma once

#include <cstdint>

#include "src/cuda/common/cache_index.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

struct AttnParams {
  // activations (strides in elements; the last dimension is contiguous)
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;  // null = not requested
  std::int64_t l_tok, l_head;
  // cache
  const void* k;
  const void* v;
  Strides4 ks, vs;
  int layout;
  int x;
  std::int64_t num_blocks;
  std::int64_t block_size;
  int k_unit;  // bytes per cp.async unit for key rows (16/8/4), 0 = element-wise copies
  int v_unit;
  // metadata (device)
  const std::int32_t* block_table;
  std::int64_t bt_seq, bt_blk, bt_width;
  const std::int32_t* seq_lens;
  std::int64_t sl_stride;
  const std::int32_t* qsl;
  std::int64_t qsl_stride;
  int num_seqs;
  std::int64_t num_tokens;
  int num_heads;
  int gqa;
  int head_size;
  // math
  float score_scale;  // scale * k_scale (k_scale = 1 for non-fp8 caches or device scales)
  float v_scale;      // 1 for non-fp8 caches
  // KVCache::k_scales / v_scales (fill_cache_scales): null = the scalars above. Otherwise
  // KV head g's scores are scaled by score_scale * k_scales[g * scales_stride] and its output
  // by v_scales[g * scales_stride], read on the device.
  const float* k_scales;
  const float* v_scales;
  int scales_stride;
  float softcap;      // 0 = off
  int window;         // 0 = off
  const float* alibi;  // null = off
  std::int64_t alibi_stride;
  const float* sinks;  // null = off
  std::int64_t sinks_stride;
  // launch configuration (TiledConfig)
  int heads_per_cta;
  int head_groups;
  int q_tokens;
  int rows;
  int tile_tokens;
  int tile_rows;
  int num_splits;
  // > 0: split s of a sequence covers keys [s * chunk, (s + 1) * chunk) with chunk =
  // split_tokens doubled until num_splits chunks cover the sequence (tiled_split_chunk), a
  // cut that depends on the sequence's own length only. 0: chunk = ceil(seq_len /
  // num_splits) rounded up to a tile.
  int split_tokens;
  // 1: KV tiles start on multiples of tile_tokens of absolute key positions (not at the
  // CTA's first key), so that a row's sums do not depend on which rows share its CTA
  // (PlanOptions::batch_invariant).
  int tile_grid;
  TiledSmem smem;
  // workspace
  std::int32_t* tile_start;  // [num_seqs + 1] (written by the prep kernel)
  float* part_lse;           // [num_splits, num_tokens, num_heads] when num_splits > 1
  float* part_out;           // [num_splits, num_tokens, num_heads, head_size]
};

}  // namespace pagedattn::cuda
