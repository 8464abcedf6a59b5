// The parameter struct both Hopper prefill kernels take (prefill_wgmma.cu: the first,
// barrier-per-tile version; prefill_wgmma_ws.cu: the warp-specialised one), and its filling
// from validated arguments: written once so that the two kernels read the same fields.
#pragma once

#include <cstdint>

#include "pagedattn/attention.h"
#include "src/cuda/common/mma_args.h"

namespace pagedattn::cuda {

struct WgParams {
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;  // null = not requested
  std::int64_t l_tok, l_head;
  const void* k;
  const void* v;
  // key / value element (block b, kv head g, token t, 8-element chunk c) at
  //   b*blk + g*head + t*tok + c*chunk (+ 0..7)
  std::int64_t k_blk, k_head, k_tok, k_chunk;
  std::int64_t v_blk, v_head, v_tok, v_chunk, v_dim;
  const int* block_table;
  std::int64_t bt_seq, bt_blk, bt_width;
  std::int64_t num_blocks;
  const int* seq_lens;
  std::int64_t sl_stride;
  const int* qsl;
  std::int64_t qsl_stride;
  int num_seqs, gqa, block_size, window;
  // Logits in log2 units (the softmax uses exp2): without softcap z = s * scale_log2; with
  // softcap c, z = cap_log2 * tanh(s * cap_arg) with cap_arg = scale / c, cap_log2 = c*log2(e).
  float scale_log2;
  float softcap;
  float cap_arg, cap_log2;
  const float* alibi;  // null = off
  std::int64_t alibi_stride;
  const float* sinks;  // null = off
  std::int64_t sinks_stride;
  const int* tile_start;  // [num_seqs + 1], written by launch_tile_prefix
  // Diagnostics of the warp-specialised kernel only (wrong results; for profiling what limits
  // it), from PAGEDATTN_DEBUG_PREFILL_WS: 1 = no ping-pong between the consumers, 2 = no
  // softmax (raw scores as P), 4 = the producer copies nothing (arrives on the full barriers
  // at once); 8 = K/V by the cp.async gather only, no TMA boxes (results stay right: an A/B of
  // the two loaders). 0 in normal use.
  int debug_flags;
  // The problem's head size: the instance's HEAD, or (warp-specialised kernel, masked heads,
  // prefill_ws_instance_head) a smaller multiple of 8 whose dims past it are zero-filled in
  // shared memory and not stored.
  int head_size;
  // fp8 caches (warp-specialised kernel): the dequantisation scales, as decode takes them
  // (fill_cache_scales; cache_scale picks a KV head's device value or the host scalar).
  // After head_size, so that the 16-bit instances' parameter offsets stay as they were.
  const float* k_scales;
  const float* v_scales;
  int scales_stride;
  float k_scale, v_scale;
};

/// The parameters of `args` (validated; any layout, mma_cache_strides) for a cache of `block_size`
/// tokens per block; tile_start is left for the caller.
inline WgParams make_wg_params(const AttentionArgs& args, int block_size) {
  constexpr float kLog2e = 1.4426950408889634f;
  WgParams p{};
  fill_attention_params(p, args);
  const MmaCacheStrides cs = mma_cache_strides(args.cache);
  p.k_blk = cs.k_blk; p.k_head = cs.k_head; p.k_tok = cs.k_tok; p.k_chunk = cs.k_chunk;
  p.v_blk = cs.v_blk; p.v_head = cs.v_head; p.v_tok = cs.v_tok; p.v_chunk = cs.v_chunk;
  p.v_dim = cs.v_dim;
  p.bt_width = args.block_table.shape[1];
  p.num_blocks = args.cache.key.shape[0];
  p.num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  p.gqa = static_cast<int>(args.query.shape[1]) / cs.num_kv_heads;
  p.block_size = block_size;
  p.head_size = static_cast<int>(args.query.shape[2]);
  fill_cache_scales(p, args.cache);
  p.k_scale = args.cache.k_scale;
  p.v_scale = args.cache.v_scale;
  const float scale = args.params.scale;
  p.scale_log2 = scale * kLog2e;
  if (p.softcap > 0.f) {
    p.cap_arg = scale / p.softcap;
    p.cap_log2 = p.softcap * kLog2e;
  }
  return p;
}

/// Launch the warp-specialised kernel (prefill_wgmma_ws.cu) over `row_tiles` x
/// `num_kv_heads` CTAs on `stream` (a cudaStream_t); p.tile_start already written on it.
/// head: a multiple of 8 up to 256 (prefill_ws_instance_head; else kInternal); `cache`: the
/// cache dtype, the query's (fp16/bf16) or fp8 e4m3/e5m2; `split`: the cache has vLLM's split
/// layout (block_size a multiple of 8; 16-bit caches only); kInternal for launch errors.
Status prefill_ws_launch(const WgParams& p, int head, bool bf16, DType cache, bool split,
                         std::int64_t row_tiles, int num_kv_heads, void* stream);

}  // namespace pagedattn::cuda
