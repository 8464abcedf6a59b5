// Launcher of the CUDA tiled attention kernel (tiled_launch.h): the tile prefix sums, the
// kernel and the deterministic split merge.
#include <algorithm>
#include <climits>

#include "src/cuda/common/launch_args.h"
#include "src/cuda/tiled/attention_kernel.cuh"
#include "src/cuda/tiled/cuda_config.h"
#include "src/cuda/tiled/tiled_launch.h"

namespace pagedattn::cuda {

namespace {

// ------------------------------------------------------------------ prep kernel

/// tile_start[s] = sum over s' < s with min_query_len <= query_len[s'] <= max_query_len of
/// ceil(query_len[s'] * rows_per_token / rows_per_tile); tile_start[num_seqs] = the total
/// (launch_tile_prefix, cuda_config.h). One CTA of 1024
/// threads, block scans in a loop (deterministic, no atomics).
__global__ void __launch_bounds__(1024)
    tile_prefix_kernel(const std::int32_t* qsl, std::int64_t qsl0, int num_seqs,
                       int rows_per_tile, int rows_per_token, int min_query_len,
                       int max_query_len, std::int32_t* tile_start) {
  __shared__ long long warp_tot[32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  long long carry = 0;
  for (int base = 0; base < num_seqs; base += 1024) {
    const int s = base + tid;
    long long v = 0;
    if (s < num_seqs) {
      const long long ql = static_cast<long long>(qsl[static_cast<std::int64_t>(s + 1) * qsl0]) -
                           static_cast<long long>(qsl[static_cast<std::int64_t>(s) * qsl0]);
      v = (ql > 0 && ql >= min_query_len && ql <= max_query_len)
              ? (ql * rows_per_token + rows_per_tile - 1) / rows_per_tile
              : 0;
    }
    long long x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const long long y = __shfl_up_sync(0xFFFFFFFFu, x, o);
      if (lane >= o) x += y;
    }
    if (lane == 31) warp_tot[warp] = x;
    __syncthreads();
    if (warp == 0) {
      long long w = warp_tot[lane];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const long long y = __shfl_up_sync(0xFFFFFFFFu, w, o);
        if (lane >= o) w += y;
      }
      warp_tot[lane] = w;
    }
    __syncthreads();
    const long long incl = x + (warp > 0 ? warp_tot[warp - 1] : 0);
    if (s < num_seqs) tile_start[s] = static_cast<std::int32_t>(min(carry + incl - v, (long long)INT_MAX));
    carry += warp_tot[31];
    __syncthreads();
  }
  if (tid == 0) tile_start[num_seqs] = static_cast<std::int32_t>(min(carry, (long long)INT_MAX));
}

// ------------------------------------------------------------------ split merge

/// Sequence of query token `t` (qsl[s] <= t < qsl[s + 1]; qsl is non-decreasing). Binary search
/// over the num_seqs + 1 offsets.
__device__ __forceinline__ int token_sequence(const AttnParams& p, std::int64_t t) {
  int lo = 0, hi = p.num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (static_cast<std::int64_t>(p.qsl[static_cast<std::int64_t>(mid) * p.qsl_stride]) <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Combine the num_splits partial states of each (token, head) in split order (fixed, so the
/// result is deterministic): out = sum_p e^(lse_p - M) out_p / sum_p e^(lse_p - M).
/// Only the rows of sequences the kernel ran (tile_start[s + 1] > tile_start[s]): with
/// max_query_len 1 the prefill rows belong to the prefill kernel, which writes them.
template <class Q>
__global__ void __launch_bounds__(128) split_merge_kernel(const AttnParams p, bool filter) {
  const int lane = threadIdx.x & 31;
  const std::int64_t rows = p.num_tokens * p.num_heads;
  const std::int64_t warps_total = static_cast<std::int64_t>(gridDim.x) * 4;
  const int S = p.num_splits;
  const int D = p.head_size;
  const std::int64_t split_stride = p.num_tokens * p.num_heads;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * 4 + (threadIdx.x >> 5); r < rows;
       r += warps_total) {
    const std::int64_t tr = r / p.num_heads;
    const std::int64_t head = r - tr * p.num_heads;
    if (filter) {
      const int sq = token_sequence(p, tr);
      if (p.tile_start[sq + 1] == p.tile_start[sq]) continue;
    }
    float mx = -INFINITY;
    for (int s = lane; s < S; s += 32) mx = fmaxf(mx, p.part_lse[s * split_stride + r]);
    // mx is -inf when every split is empty or NaN (NaN scores): softmax_base keeps NaN.
    mx = softmax_base(warp_max(mx));
    float sum = 0.f;
    for (int s = lane; s < S; s += 32) {
      const float l = p.part_lse[s * split_stride + r];
      if (l != -INFINITY) sum += expf(l - mx);
    }
    sum = warp_sum(sum);
    // sum = 0: every key's logit is -inf (no sink): 0/0, NaN as in the oracle.
    const float inv = sum != 0.f ? 1.f / sum : NAN;
    Q* o = static_cast<Q*>(p.out) + tr * p.o_tok + head * p.o_head;
    for (int d = lane; d < D; d += 32) {
      float a = 0.f;
      for (int s = 0; s < S; ++s) {
        const float l = p.part_lse[s * split_stride + r];
        // An empty split's partial output is never read (it may be garbage).
        if (l != -INFINITY) a = fmaf(expf(l - mx), p.part_out[(s * split_stride + r) * D + d], a);
      }
      store_rounded<Q>(o + d, a * inv);
    }
    if (p.lse && lane == 0)
      p.lse[tr * p.l_tok + head * p.l_head] = sum != 0.f ? mx + logf(sum) : NAN;
  }
}

int kv_kind(DType cache) {
  return cache == DType::kFloat8E4M3 ? kKvE4M3 : cache == DType::kFloat8E5M2 ? kKvE5M2 : kKvSame;
}

template <class Q>
cudaError_t launch_for_query(const AttnParams& p, int kv, int kp, int mmax, dim3 grid,
                             int smem_optin, cudaStream_t s) {
  switch (kv) {
    case kKvE4M3: return launch_tiled<Q, kKvE4M3>(p, kp, mmax, grid, smem_optin, s);
    case kKvE5M2: return launch_tiled<Q, kKvE5M2>(p, kp, mmax, grid, smem_optin, s);
    default: return launch_tiled<Q, kKvSame>(p, kp, mmax, grid, smem_optin, s);
  }
}

}  // namespace

Status tiled_run(const AttentionArgs& args, const KVCacheGeometry& g, const TiledConfig& cfg,
                 const TiledWorkspace& wsl, std::int64_t total_tiles, int min_query_len,
                 int max_query_len, int smem_optin, void* workspace, Stream stream) {
  const KVCache& cache = args.cache;
  const int es = static_cast<int>(dtype_size(g.dtype));
  const bool fp8 = is_fp8(g.dtype);
  AttnParams p{};
  fill_attention_params(p, args);
  fill_cache_geometry(p, cache, g);
  const bool split = cache.layout == KVLayout::kSplit;
  // Copy units: the largest of 16/8/4 bytes that base address and strides allow.
  p.k_unit = choose_unit_bytes(reinterpret_cast<std::uintptr_t>(cache.key.data), p.ks.s,
                               split ? 4 : 3, es, split ? g.x : g.head_size);
  p.v_unit = choose_unit_bytes(reinterpret_cast<std::uintptr_t>(cache.value.data), p.vs.s,
                               split ? 4 : 3, es, split ? 1 : g.head_size);
  p.bt_width = args.block_table.shape[1];
  p.num_seqs = static_cast<int>(args.seq_lens.shape[0]);
  p.num_tokens = args.query.shape[0];
  p.num_heads = static_cast<int>(args.query.shape[1]);
  p.gqa = p.num_heads / g.num_kv_heads;
  p.head_size = g.head_size;
  p.score_scale = args.params.scale * (fp8 ? cache.k_scale : 1.0f);
  p.v_scale = fp8 ? cache.v_scale : 1.0f;
  fill_cache_scales(p, cache);  // validated: only fp8 caches have them
  if (p.k_scales != nullptr) {
    // The device scales replace the scalars (the kernel multiplies them in).
    p.score_scale = args.params.scale;
    p.v_scale = 1.0f;
  }
  p.heads_per_cta = cfg.heads_per_cta;
  p.head_groups = cfg.head_groups;
  p.q_tokens = cfg.q_tokens;
  p.rows = cfg.rows;
  p.tile_tokens = cfg.tile_tokens;
  p.tile_rows = cfg.tile_rows;
  p.num_splits = cfg.num_splits;
  p.split_tokens = cfg.split_tokens;
  p.tile_grid = cfg.tile_grid ? 1 : 0;
  p.smem = cfg.smem;
  unsigned char* ws = static_cast<unsigned char*>(workspace);
  p.tile_start = reinterpret_cast<std::int32_t*>(ws + wsl.off_tile_start);
  if (cfg.num_splits > 1) {
    p.part_lse = reinterpret_cast<float*>(ws + wsl.off_part_lse);
    p.part_out = reinterpret_cast<float*>(ws + wsl.off_part_out);
  }

  cudaStream_t s = static_cast<cudaStream_t>(stream);
  PAGEDATTN_RETURN_IF_ERROR(launch_tile_prefix(p.qsl, p.qsl_stride, p.num_seqs, p.q_tokens, 1,
                                               min_query_len, max_query_len, p.tile_start,
                                               stream));

  const dim3 grid(static_cast<unsigned>(total_tiles),
                  static_cast<unsigned>(g.num_kv_heads * cfg.head_groups),
                  static_cast<unsigned>(cfg.num_splits));
  const int kv = kv_kind(g.dtype);
  cudaError_t err = cudaSuccess;
  switch (args.query.dtype) {
    case DType::kFloat32:
      err = launch_for_query<float>(p, kv, cfg.kp, cfg.mmax, grid, smem_optin, s);
      break;
    case DType::kFloat16:
      err = launch_for_query<__half>(p, kv, cfg.kp, cfg.mmax, grid, smem_optin, s);
      break;
    case DType::kBFloat16:
      err = launch_for_query<__nv_bfloat16>(p, kv, cfg.kp, cfg.mmax, grid, smem_optin, s);
      break;
    default:
      return Status(StatusCode::kUnsupported,
                    std::string("cuda attention: query dtype ") + to_string(args.query.dtype));
  }
  PA_CUDA_RETURN(err, "tiled_attention_kernel launch");

  if (cfg.num_splits > 1) {
    const std::int64_t rows = p.num_tokens * p.num_heads;
    const unsigned blocks =
        static_cast<unsigned>(std::min<std::int64_t>((rows + 3) / 4, std::int64_t{1} << 20));
    // Every row is the kernel's unless a query-length range leaves some to another kernel.
    const bool filter = min_query_len > 1 || max_query_len != INT_MAX;
    switch (args.query.dtype) {
      case DType::kFloat32: split_merge_kernel<float><<<blocks, 128, 0, s>>>(p, filter); break;
      case DType::kFloat16: split_merge_kernel<__half><<<blocks, 128, 0, s>>>(p, filter); break;
      default: split_merge_kernel<__nv_bfloat16><<<blocks, 128, 0, s>>>(p, filter); break;
    }
    PA_CUDA_RETURN(cudaGetLastError(), "split_merge_kernel launch");
  }
  return Status::Ok();
}

Status launch_tile_prefix(const std::int32_t* qsl, std::int64_t stride, int num_seqs,
                          int rows_per_tile, int rows_per_token, int min_query_len,
                          int max_query_len, std::int32_t* tile_start, void* stream) {
  tile_prefix_kernel<<<1, 1024, 0, static_cast<cudaStream_t>(stream)>>>(
      qsl, stride, num_seqs, rows_per_tile, rows_per_token, min_query_len, max_query_len,
      tile_start);
  PA_CUDA_RETURN(cudaGetLastError(), "tile_prefix_kernel launch");
  return Status::Ok();
}

}  // namespace pagedattn::cuda
