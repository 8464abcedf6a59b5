// Filling of the kernels' parameter structs from validated arguments, written once for every
// launcher: the fields the attention kernels share under the same names (the tiled kernel,
// the decode fast path, the prefill kernel) and the cache fields the tiled reader and the
// cache writer share. Header-only and free of CUDA headers, so that the host unit tests check
// the code the launchers run.
#pragma once

#include <cstdint>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "src/cuda/common/cache_index.h"

namespace pagedattn::cuda {

/// The strides (elements) of `t`'s first four dimensions, 0 past its rank.
inline Strides4 strides4(const TensorView& t) {
  Strides4 s{};
  for (int d = 0; d < 4; ++d) s.s[d] = d < t.ndim ? t.strides[d] : 0;
  return s;
}

/// Fill the fields every attention kernel's parameter struct `P` has under the same names:
/// query, output and LSE rows (pointers, token and head strides in elements; lse null when not
/// requested), the cache base pointers, the metadata (block table, seq_lens,
/// query_start_loc) pointers and strides, and the score modifiers of AttentionParams (softcap
/// and sliding window as given, 0 = off; ALiBi slopes and sinks: pointer and stride, left null
/// when absent). bt_blk is narrowed to the struct's type.
template <class P>
void fill_attention_params(P& p, const AttentionArgs& args) {
  p.q = args.query.data;
  p.q_tok = args.query.strides[0];
  p.q_head = args.query.strides[1];
  p.out = args.out.data;
  p.o_tok = args.out.strides[0];
  p.o_head = args.out.strides[1];
  if (args.lse.defined()) {
    p.lse = static_cast<float*>(args.lse.data);
    p.l_tok = args.lse.strides[0];
    p.l_head = args.lse.strides[1];
  }
  p.k = args.cache.key.data;
  p.v = args.cache.value.data;
  p.block_table = static_cast<const int*>(args.block_table.data);
  p.bt_seq = args.block_table.strides[0];
  p.bt_blk = static_cast<decltype(p.bt_blk)>(args.block_table.strides[1]);
  p.seq_lens = static_cast<const int*>(args.seq_lens.data);
  p.sl_stride = args.seq_lens.strides[0];
  p.qsl = static_cast<const int*>(args.query_start_loc.data);
  p.qsl_stride = args.query_start_loc.strides[0];
  p.softcap = args.params.softcap;
  p.window = args.params.sliding_window;
  if (args.params.alibi_slopes.defined()) {
    p.alibi = static_cast<const float*>(args.params.alibi_slopes.data);
    p.alibi_stride = args.params.alibi_slopes.strides[0];
  }
  if (args.params.sinks.defined()) {
    p.sinks = static_cast<const float*>(args.params.sinks.data);
    p.sinks_stride = args.params.sinks.strides[0];
  }
}

/// Fill the cache fields the strided readers and writers address with key_offset /
/// value_offset (cache_index.h): the four leading strides of each cache tensor, the layout
/// code, x (1 for nhd/hnd), the number of blocks and the block size.
template <class P>
void fill_cache_geometry(P& p, const KVCache& cache, const KVCacheGeometry& g) {
  p.ks = strides4(cache.key);
  p.vs = strides4(cache.value);
  p.layout = static_cast<int>(cache.layout);
  p.x = g.x > 0 ? g.x : 1;
  p.num_blocks = g.num_blocks;
  p.block_size = g.block_size;
}

/// Fill the device-scale fields of a kernel parameter struct `P` (`const float* k_scales,
/// v_scales; int scales_stride`): the pointers of KVCache::k_scales / v_scales (null when the
/// cache has none, and the kernels use their host scalars) and the element stride between KV
/// heads' scales (0 for a `[1]` tensor, 1 for `[num_kv_heads]`). The kernels read
/// `k_scales[kv_head * scales_stride]` (cache_scale in cuda_common.cuh).
template <class P>
void fill_cache_scales(P& p, const KVCache& cache) {
  p.k_scales = nullptr;
  p.v_scales = nullptr;
  p.scales_stride = 0;
  if (!cache.k_scales.defined()) return;
  p.k_scales = static_cast<const float*>(cache.k_scales.data);
  p.v_scales = static_cast<const float*>(cache.v_scales.data);
  p.scales_stride = cache.k_scales.numel() > 1 ? 1 : 0;
}

}  // namespace pagedattn::cuda
