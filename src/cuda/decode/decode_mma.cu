// The CUDA decode fast path: see decode_mma.h for the design; the kernels are in
// decode_mma_kernel.cuh and decode_mma_launch.cuh, the fp8-cache launches in decode_mma_fp8.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "src/cuda/common/cuda_common.cuh"
#include "src/cuda/common/fast_div.h"
#include "src/cuda/common/mma_args.h"
#include "src/cuda/decode/decode_common.cuh"
#include "src/cuda/decode/decode_mma.h"
#include "src/cuda/decode/decode_mma_launch.cuh"

namespace pagedattn::cuda {

namespace {

template <class T, int HEAD>
int ctas_16bit(int gqa, bool split, int head_size) {
  if constexpr (HEAD == 256) {
    constexpr int ST = decode_mma_stages(HEAD, 2);
    if (head_size < HEAD)  // a masked instance
      return with_masked_head<decode_mma_masked_low(HEAD, false), HEAD>(head_size, 0, [&](auto rh) {
        constexpr int RH = decltype(rh)::value;
        return split ? instance_ctas_per_sm<T, HEAD, true, 1, kKvSame, ST, RH>()
                     : instance_ctas_per_sm<T, HEAD, false, 1, kKvSame, ST, RH>();
      });
    return split ? instance_ctas_per_sm<T, HEAD, true, 1>() : instance_ctas_per_sm<T, HEAD, false, 1>();
  } else {
    if (gqa > 8)
      return split ? instance_ctas_per_sm<T, HEAD, true, 2>() : instance_ctas_per_sm<T, HEAD, false, 2>();
    return split ? instance_ctas_per_sm<T, HEAD, true, 1>() : instance_ctas_per_sm<T, HEAD, false, 1>();
  }
}

template <class T>
int ctas_16bit_head(int head, int gqa, bool split, int head_size) {
  if (head == 64) return ctas_16bit<T, 64>(gqa, split, 64);
  if (head == 128) return ctas_16bit<T, 128>(gqa, split, 128);
  return ctas_16bit<T, 256>(gqa, split, head_size);
}

/// The kernel instance of one launch: the fp8 TU, the head-64 pairs, the heads of this TU
/// (64, 128, 256) or the TU of a head between (decode_mma_h<HEAD>.cu); a head without an
/// instance of its own runs masked on the next larger one (decode_mma_instance_head).
Status launch_heads(const DecodeParams& p, int head_size, bool bf16, bool fp8, bool pair, DType kv,
                    KVLayout layout, const decode::DecodeGrid& gr, cudaStream_t st) {
  const int head = decode_mma_instance_head(head_size, fp8 ? 1 : 2);
  if (fp8) return decode::launch_fp8_call(p, head, kv, layout, gr, st);
  if (pair)
    return bf16 ? launch<__nv_bfloat16, 128, false, 1, true>(p, gr, st)
                : launch<__half, 128, false, 1, true>(p, gr, st);
  switch (head) {
    case 64:
      return bf16 ? launch_layout<__nv_bfloat16, 64>(p, layout, gr, st)
                  : launch_layout<__half, 64>(p, layout, gr, st);
    case 80: return decode::launch_head_call<80>(p, bf16, layout, gr, st);
    case 96: return decode::launch_head_call<96>(p, bf16, layout, gr, st);
    case 112: return decode::launch_head_call<112>(p, bf16, layout, gr, st);
    case 192: return decode::launch_head_call<192>(p, bf16, layout, gr, st);
    case 512: return decode::launch_head_call<512>(p, bf16, layout, gr, st);
    case 256:
      return bf16 ? launch_layout<__nv_bfloat16, 256>(p, layout, gr, st)
                  : launch_layout<__half, 256>(p, layout, gr, st);
    default:
      return bf16 ? launch_layout<__nv_bfloat16, 128>(p, layout, gr, st)
                  : launch_layout<__half, 128>(p, layout, gr, st);
  }
}

}  // namespace

int decode_mma_device_ctas_per_sm(int head_size, int gqa, DType q, DType kv, KVLayout layout) {
  const bool fp8 = kv == DType::kFloat8E4M3 || kv == DType::kFloat8E5M2;
  const int inst = decode_mma_instance_head(head_size, fp8 ? 1 : 2);
  if (inst != 64 && inst != 128 && inst != 256 && !(fp8 && inst == 512)) return 0;
  const bool split = layout == KVLayout::kSplit;
  if (fp8) return decode::fp8_ctas_per_sm(inst, head_size, gqa, kv, layout);
  return q == DType::kBFloat16 ? ctas_16bit_head<__nv_bfloat16>(inst, gqa, split, head_size)
                               : ctas_16bit_head<__half>(inst, gqa, split, head_size);
}

Status decode_mma_run(const AttentionArgs& args, int block_size, const DecodeMmaConfig& config,
                      void* workspace, Stream stream) {
  const int chunk_tokens = config.chunk_tokens;
  const int num_splits = config.num_splits;
  DecodeParams p{};
  fill_attention_params(p, args);
  // Byte strides (decode_mma_aligned_strides: element strides in [0, 2^31), so twice fits in
  // 32 unsigned bits); the values' chunk stride is not needed (nhd/hnd: 16 bytes).
  const MmaCacheStrides cs = mma_cache_strides(args.cache);
  const DType kv = args.cache.key.dtype;
  const bool fp8 = kv == DType::kFloat8E4M3 || kv == DType::kFloat8E5M2;
  const int eb = fp8 ? 1 : 2;
  auto b32 = [eb](std::int64_t elems) { return static_cast<unsigned>(elems * eb); };
  p.k_blk = b32(cs.k_blk); p.k_head = cs.k_head; p.k_tok = b32(cs.k_tok);
  p.k_chunk = b32(cs.k_chunk);
  p.v_blk = b32(cs.v_blk); p.v_head = cs.v_head; p.v_tok = b32(cs.v_tok);
  p.v_dim = b32(cs.v_dim);
  p.bs_div = FastDiv(static_cast<std::uint32_t>(block_size));
  const int head_tile = decode_mma_tile_tokens(static_cast<int>(args.query.shape[2]));
  p.step_q = head_tile / block_size;
  p.step_r = head_tile % block_size;
  const int num_heads = static_cast<int>(args.query.shape[1]);
  const int head = static_cast<int>(args.query.shape[2]);
  // Pairs (decode_mma_pairs_heads): the grid's KV head g is the two real heads 2g, 2g + 1,
  // one 256-byte row per token. A cache whose heads are no longer adjacent (a view with other
  // strides than the plan's) runs unpaired with the same cut: correct, only cut for the other
  // kernel.
  const bool pair = config.pair_heads && head == 64 && cs.num_kv_heads % 2 == 0 &&
                    decode_mma_heads_adjacent(args);
  // The head-64 kernel's own limit, the same as on every unpaired call.
  const std::int64_t smem_limit =
      config.pair_heads && !pair ? config.smem_limit_unpaired : config.smem_limit;
  if (pair) {
    p.k_head *= 2;
    p.v_head *= 2;
  }
  const int num_kv_heads = pair ? cs.num_kv_heads / 2 : cs.num_kv_heads;
  p.num_heads = num_heads;
  p.head_size = pair ? 64 : head;
  p.gqa = num_heads / num_kv_heads;
  p.block_size = block_size;
  p.scale = args.params.scale;
  p.scale_log2 = args.params.scale * kLog2e;
  fill_cache_scales(p, args.cache);
  p.k_scale = args.cache.k_scale;
  p.v_scale = args.cache.v_scale;
  p.q_bf16 = args.query.dtype == DType::kBFloat16 ? 1 : 0;
  p.chunk = chunk_tokens;
  p.max_splits = num_splits;
  const int num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  if (num_splits > 1) {
    const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_splits * num_heads;
    const std::size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
    p.part_lse = static_cast<float*>(workspace);
    p.part_o = reinterpret_cast<float*>(static_cast<char*>(workspace) + lse_bytes);
  }
  if (num_seqs == 0) return Status::Ok();
  DeviceGuard guard(args.query.device.index);
  PA_CUDA_RETURN(guard.status(), "decode_mma: cudaSetDevice");
  cudaStream_t st = static_cast<cudaStream_t>(stream);
  decode::DecodeGrid gr{num_splits, num_kv_heads, num_seqs, 0, static_cast<int>(smem_limit),
                config.dependent_launch, config.batch_invariant, config.fp8_untuned};
  p.num_seqs = num_seqs;
  // Work-list mode when many splits meet few enough sequences: a grid of (splits x sequences)
  // would launch a CTA for every split a short sequence lacks (in a skewed batch, almost all
  // of them), and each costs a scheduling slot.
  if (decode_mma_work_list(num_splits, num_seqs)) {
    // One CTA per item (the split choice keeps them to about two waves plus one per
    // sequence), so that the hardware scheduler balances them in longest-first order; a CTA
    // that finds no item exits after the scan. gridDim.y is at most 65535: CTAs stride.
    const std::int64_t items =
        std::min<std::int64_t>(static_cast<std::int64_t>(num_seqs) * num_splits, config.max_items);
    gr.list_ctas = static_cast<int>(std::clamp<std::int64_t>(items, 1, 65535));
    p.work_list = 1;
  } else if (config.small_kernel && !fp8) {  // a cluster-merge call the small kernel takes
    p.cluster = 1;
    p.bt_width = static_cast<int>(std::min<std::int64_t>(args.block_table.shape[1], INT_MAX));
    p.cl_div = FastDiv(static_cast<std::uint32_t>(num_splits));
    return decode_small_run(p, head, args.query.dtype == DType::kBFloat16, num_kv_heads, num_seqs,
                            st);
  } else if (config.cluster_merge) {  // 2..kMaxClusterSplits splits, cc >= 9 (the plan's rule)
    p.cluster = 1;
    p.cl_share = decode_cluster_share(head, p.gqa, num_splits);
    p.cl_div = FastDiv(static_cast<std::uint32_t>(p.cl_share));
  }
  const bool bf16 = args.query.dtype == DType::kBFloat16;
  KVLayout layout = args.cache.layout;
  if (decode_mma_split_as_rows(args.cache)) {
    // Block size 1: every token is alone in its block (offset 0), its 8-element key chunks
    // 16 bytes apart and its value dims adjacent (decode_mma_aligned_strides): the nhd
    // kernel's rows at the block strides, with whole 128-byte lines per copy, where the split
    // kernel would copy 2-byte value pieces.
    layout = KVLayout::kNHD;
    p.k_tok = 0;
    p.v_tok = 0;
  }
  if (num_seqs > kDecodeMaxGridSeqs && !p.work_list && !p.cluster) {
    // gridDim.z (the split kernel) and gridDim.y (the merge kernel) stop at 65535: the
    // sequences run in consecutive launches of at most that many, each with its sequences'
    // metadata, block-table rows and partial results offset (the outputs are addressed by
    // the query start, which stays absolute). Such a call is many waves long; the extra
    // launches cost nothing measurable, and the kernels are the ones of every other call.
    for (int s0 = 0; s0 < num_seqs; s0 += kDecodeMaxGridSeqs) {
      const int n = std::min(kDecodeMaxGridSeqs, num_seqs - s0);
      DecodeParams q = p;
      q.qsl += static_cast<std::int64_t>(s0) * p.qsl_stride;
      q.seq_lens += static_cast<std::int64_t>(s0) * p.sl_stride;
      q.block_table += static_cast<std::int64_t>(s0) * p.bt_seq;
      if (num_splits > 1) {
        const std::int64_t rows = static_cast<std::int64_t>(s0) * num_splits * num_heads;
        q.part_lse += rows;
        q.part_o += rows * (pair ? 64 : head);
      }
      q.num_seqs = n;
      decode::DecodeGrid g2 = gr;
      g2.num_seqs = n;
      const Status st2 = launch_heads(q, head, bf16, fp8, pair, kv, layout, g2, st);
      if (!st2.ok()) return st2;
    }
    return Status::Ok();
  }
  return launch_heads(p, head, bf16, fp8, pair, kv, layout, gr, st);
}

}  // namespace pagedattn::cuda
