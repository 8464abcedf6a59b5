// The CUDA decode fast path: see decode_mma.h for the design.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

#include "src/cuda/cuda_common.cuh"
#include "src/cuda/decode_mma.h"
#include "src/cuda/mma_common.cuh"

namespace pagedattn::cuda {

namespace {

using namespace mma;

constexpr int kMaxDecodeSplits = 512;
constexpr int kMinChunkTokens = 128;
/// CTA-slot "waves" the split choice aims at: enough small CTAs that the hardware scheduler
/// evens out unequal sequence lengths, few enough that the merge stays negligible.
constexpr int kWaves = 8;

struct DecodeParams {
  const void* q;
  std::int64_t q_tok, q_head;
  void* out;
  std::int64_t o_tok, o_head;
  float* lse;
  std::int64_t l_tok, l_head;
  const void* k;
  const void* v;
  // key element (block b, kv head g, token t, 8-element chunk c) at
  //   b*k_blk + g*k_head + t*k_tok + c*k_chunk (+ 0..7)
  std::int64_t k_blk, k_head, k_tok, k_chunk;
  // value, nhd/hnd: the same form; split: b*v_blk + g*v_head + d*v_dim + t
  std::int64_t v_blk, v_head, v_tok, v_chunk, v_dim;
  const int* block_table;
  std::int64_t bt_seq, bt_blk;
  const int* seq_lens;
  std::int64_t sl_stride;
  const int* qsl;
  std::int64_t qsl_stride;
  int num_heads, gqa, block_size;
  float scale, softcap;
  int window;
  const float* alibi;
  std::int64_t alibi_stride;
  const float* sinks;
  std::int64_t sinks_stride;
  int chunk, max_splits;
  float* part_o;
  float* part_lse;
};

/// Split range of sequence `s`: keys [valid_lo, end) of split `split`; false if the split or
/// the sequence has no work. Splits start on 64-token boundaries of absolute positions.
__device__ __forceinline__ bool split_range(const DecodeParams& p, int len, int split,
                                            int* start, int* valid_lo, int* end, int* nsplit) {
  const int lo = p.window > 0 ? max(0, len - p.window) : 0;
  const int lo_al = lo & ~(kDecodeTileTokens - 1);
  *nsplit = (len - lo_al + p.chunk - 1) / p.chunk;
  if (split >= *nsplit) return false;
  *start = lo_al + split * p.chunk;
  *end = min(len, *start + p.chunk);
  *valid_lo = max(*start, lo);
  return *valid_lo < *end;
}

template <class T, int HEAD, bool SPLIT_K, bool SPLIT_V, int STAGES>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_mma_kernel(const DecodeParams p) {
  constexpr int TOK = kDecodeTileTokens;
  constexpr int CH = HEAD / 8;  // 16-byte chunks per head row
  constexpr int TILE = TOK * HEAD;
  constexpr int KSTEPS = HEAD / 16;
  constexpr int DT = HEAD / 8;  // n-tiles of the output
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + 16 * HEAD;
  T* sV = sK + STAGES * TILE;

  const int split = blockIdx.x, g = blockIdx.y, s = blockIdx.z;
  const int q0 = p.qsl[s * p.qsl_stride];
  if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1) return;  // skipped or not a decode
  const int len = p.seq_lens[s * p.sl_stride];
  int start, valid_lo, end, nsplit;
  if (!split_range(p, len, split, &start, &valid_lo, &end, &nsplit)) return;
  const int q_pos = len - 1;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
  const int* bt = p.block_table + static_cast<std::int64_t>(s) * p.bt_seq;
  const int bs = p.block_size;
  const T* kbase = static_cast<const T*>(p.k) + static_cast<std::int64_t>(g) * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + static_cast<std::int64_t>(g) * p.v_head;

  // Query rows of the GQA group (rows >= gqa are zero and never written back).
  for (int i = tid; i < 16 * CH; i += kDecodeThreads) {
    const int r = i / CH, c = i % CH;
    const bool ok = r < p.gqa;
    const T* src = static_cast<const T*>(p.q);
    if (ok) src += static_cast<std::int64_t>(q0) * p.q_tok +
                   static_cast<std::int64_t>(g * p.gqa + r) * p.q_head + c * 8;
    cp_async16(smem_addr(sQ + swz(r, c, HEAD)), src, ok ? 16 : 0);
  }
  cp_async_commit();

  // Per-thread token rows of a tile are fixed by the thread index (128 is a multiple of both
  // 64 and the chunks per row), so the block-table entries a thread needs for tile n+1 are
  // fetched into registers while tile n computes: the cp.async issue never waits on a
  // block-table load (a serialised global-memory round trip per row otherwise).
  constexpr int NK = SPLIT_K ? 1 : TOK * CH / kDecodeThreads;  // key rows per thread
  constexpr int KREP = TOK * CH / kDecodeThreads;              // 16-byte key copies per thread
  int kid[NK], koff[NK];  // physical block (-1 = masked) and in-block offset of each row
  int vid = -1, voff = 0; // split values: the thread's 8-token chunk
  auto fetch_ids = [&](int tile) {
    const int t0 = start + tile * TOK;
    if constexpr (SPLIT_K) {
      const int t = t0 + tid % TOK;
      const bool ok = t >= valid_lo && t < end;
      kid[0] = ok ? bt[static_cast<std::int64_t>(t / bs) * p.bt_blk] : -1;
      koff[0] = ok ? t % bs : 0;
    } else {
      // Rows t_first + k * STEP: one division per tile, then walk the block index (integer
      // division costs tens of instructions, and this runs for every tile).
      constexpr int STEP = kDecodeThreads / CH;
      const int t_first = t0 + tid / CH;
      int q = t_first / bs, o = t_first - q * bs;
#pragma unroll
      for (int k = 0; k < NK; ++k) {
        const int t = t_first + k * STEP;
        const bool ok = t >= valid_lo && t < end;
        kid[k] = ok ? bt[static_cast<std::int64_t>(q) * p.bt_blk] : -1;
        koff[k] = o;
        o += STEP;
        if (bs >= STEP) {
          if (o >= bs) {
            o -= bs;
            ++q;
          }
        } else {
          q += o / bs;
          o %= bs;
        }
      }
    }
    if constexpr (SPLIT_V) {
      const int tt = t0 + (tid % (TOK / 8)) * 8;
      const bool any = tt + 8 > valid_lo && tt < end;
      vid = any ? bt[static_cast<std::int64_t>(tt / bs) * p.bt_blk] : -1;
      voff = any ? tt % bs : 0;
    }
  };
  auto issue_tile = [&](int tile, int stage) {
    const int t0 = start + tile * TOK;
    T* dk = sK + stage * TILE;
    T* dv = sV + stage * TILE;
#pragma unroll
    for (int k = 0; k < KREP; ++k) {
      // split keys: neighbouring threads take neighbouring tokens of one chunk (contiguous
      // 16-byte pieces in that layout); nhd/hnd: neighbouring chunks of one token row.
      const int r = SPLIT_K ? tid % TOK : tid / CH + k * (kDecodeThreads / CH);
      const int c = SPLIT_K ? tid / TOK + k * (kDecodeThreads / TOK) : tid % CH;
      const int slot = SPLIT_K ? 0 : k;
      const bool ok = kid[slot] >= 0;
      const T* src = ok ? kbase + static_cast<std::int64_t>(kid[slot]) * p.k_blk +
                              static_cast<std::int64_t>(koff[slot]) * p.k_tok +
                              static_cast<std::int64_t>(c) * p.k_chunk
                        : kbase;
      cp_async16(smem_addr(dk + swz(r, c, HEAD)), src, ok ? 16 : 0);
    }
    if constexpr (SPLIT_V) {
      // Value rows are head dims with tokens contiguous: a 16-byte chunk = 8 tokens of one
      // dim, inside one block because block_size % 8 == 0. Bytes at or past seq_len are
      // zero-filled (the tail of the last block may hold anything, NaN included); tokens
      // before the window inside a loaded chunk are finite data of this sequence, and their
      // probability is exactly 0.
      const int j = tid % (TOK / 8);
      const int tt = t0 + j * 8;
      const int bytes = vid >= 0 ? 2 * min(8, len - tt) : 0;
#pragma unroll
      for (int k = 0; k < HEAD * (TOK / 8) / kDecodeThreads; ++k) {
        const int d = tid / (TOK / 8) + k * (kDecodeThreads / (TOK / 8));
        const T* src = vid >= 0 ? vbase + static_cast<std::int64_t>(vid) * p.v_blk +
                                      static_cast<std::int64_t>(d) * p.v_dim + voff
                                : vbase;
        cp_async16(smem_addr(dv + swz(d, j, TOK)), src, bytes);
      }
    } else {
#pragma unroll
      for (int k = 0; k < KREP; ++k) {
        const int r = tid / CH + k * (kDecodeThreads / CH);
        const int c = tid % CH;
        const bool ok = kid[k] >= 0;
        const T* src = ok ? vbase + static_cast<std::int64_t>(kid[k]) * p.v_blk +
                                static_cast<std::int64_t>(koff[k]) * p.v_tok +
                                static_cast<std::int64_t>(c) * p.v_chunk
                          : vbase;
        cp_async16(smem_addr(dv + swz(r, c, HEAD)), src, ok ? 16 : 0);
      }
    }
  };

  const int ntiles = (end - start + TOK - 1) / TOK;
#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    fetch_ids(st);
    issue_tile(st, st);
    cp_async_commit();
  }
  fetch_ids(STAGES - 1);
  cp_async_wait<STAGES - 1>();  // the query group
  __syncthreads();

  unsigned qf[KSTEPS][4];
  {
    const int r = (lane & 7) + ((lane >> 3) & 1) * 8;
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks)
      ldmatrix_x4(qf[ks], smem_addr(sQ + swz(r, ks * 2 + (lane >> 4), HEAD)));
  }

  // Rows of this thread in the MMA fragments: lane/4 and lane/4 + 8.
  const int row0 = lane >> 2;
  float slope[2] = {0.f, 0.f};
  if (p.alibi != nullptr) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + h * 8;
      if (r < p.gqa) slope[h] = p.alibi[static_cast<std::int64_t>(g * p.gqa + r) * p.alibi_stride];
    }
  }
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    {
      // Tiles past the end have every row masked: their copies read nothing.
      const int nt = it + STAGES - 1;
      if (nt < ntiles) issue_tile(nt, nt % STAGES);
      cp_async_commit();
      if (nt + 1 < ntiles) fetch_ids(nt + 1);
    }
    const int stage = it % STAGES;
    const T* K = sK + stage * TILE;
    const T* V = sV + stage * TILE;
    const int tw = start + it * TOK + warp * 16;  // first token of this warp's 16
    if (tw + 16 <= valid_lo || tw >= end) continue;

    float sc[2][4];
#pragma unroll
    for (int n = 0; n < 2; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
    {
      const int r = warp * 16 + (lane & 7) + (lane >> 4) * 8;
      const int cb = (lane >> 3) & 1;
#pragma unroll
      for (int ks = 0; ks < KSTEPS; ++ks) {
        unsigned b[4];
        ldmatrix_x4(b, smem_addr(K + swz(r, ks * 2 + cb, HEAD)));
        mma16816<T>(sc[0], qf[ks], b[0], b[1]);
        mma16816<T>(sc[1], qf[ks], b[2], b[3]);
      }
    }

    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const int j = tw + n * 8 + 2 * (lane & 3) + (e & 1);
        float z = sc[n][e] * p.scale;
        if (p.softcap > 0.f) z = p.softcap * tanhf(z / p.softcap);
        z += slope[h] * static_cast<float>(j - q_pos);
        if (j < valid_lo || j >= end) z = -INFINITY;
        sc[n][e] = z;
        mx[h] = fmaxf(mx[h], z);
      }
    }
    float corr[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      const float m_new = fmaxf(m_run[h], mx[h]);
      // Guard the all-masked case: exp(-inf - -inf) would be NaN.
      corr[h] = m_new == -INFINITY ? 1.f : __expf(m_run[h] - m_new);
      m_run[h] = m_new;
    }
    float ps[2] = {0.f, 0.f};
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e >> 1;
        const float pv = m_run[h] == -INFINITY ? 0.f : __expf(sc[n][e] - m_run[h]);
        sc[n][e] = pv;
        ps[h] += pv;
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) l_run[h] = l_run[h] * corr[h] + ps[h];
#pragma unroll
    for (int i = 0; i < DT; ++i) {
      o[i][0] *= corr[0];
      o[i][1] *= corr[0];
      o[i][2] *= corr[1];
      o[i][3] *= corr[1];
    }
    unsigned a[4];
    a[0] = pack2<T>(sc[0][0], sc[0][1]);
    a[1] = pack2<T>(sc[0][2], sc[0][3]);
    a[2] = pack2<T>(sc[1][0], sc[1][1]);
    a[3] = pack2<T>(sc[1][2], sc[1][3]);
#pragma unroll
    for (int dt = 0; dt < HEAD / 16; ++dt) {
      unsigned b[4];
      const int m = lane >> 3;
      if constexpr (SPLIT_V) {
        const int d = dt * 16 + (lane & 7) + (m >> 1) * 8;
        ldmatrix_x4(b, smem_addr(V + swz(d, warp * 2 + (m & 1), TOK)));
      } else {
        const int r = warp * 16 + (lane & 7) + (m & 1) * 8;
        ldmatrix_x4_trans(b, smem_addr(V + swz(r, dt * 2 + (m >> 1), HEAD)));
      }
      mma16816<T>(o[dt * 2], a, b[0], b[1]);
      mma16816<T>(o[dt * 2 + 1], a, b[2], b[3]);
    }
  }
  cp_async_wait<0>();
  __syncthreads();

  // Merge the four warps' states (fixed order: deterministic).
  float* red_m = reinterpret_cast<float*>(smem_raw);  // [4][16]
  float* red_l = red_m + 64;                          // [4][16]
  float* fin = red_l + 64;                            // [2][16]: M, L per row
  float* so = fin + 32;                               // [4][16][HEAD]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 1);
    l_run[h] += __shfl_xor_sync(0xffffffffu, l_run[h], 2);
    if ((lane & 3) == 0) {
      red_m[warp * 16 + row0 + h * 8] = m_run[h];
      red_l[warp * 16 + row0 + h * 8] = l_run[h];
    }
  }
  __syncthreads();
  float f[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + h * 8;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < 4; ++w) M = fmaxf(M, red_m[w * 16 + r]);
    f[h] = m_run[h] == -INFINITY ? 0.f : __expf(m_run[h] - M);
    if (warp == 0 && (lane & 3) == 0) {
      float L = 0.f;
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float mw = red_m[w * 16 + r];
        if (mw != -INFINITY) L += red_l[w * 16 + r] * __expf(mw - M);
      }
      fin[r] = M;
      fin[16 + r] = L;
    }
  }
#pragma unroll
  for (int i = 0; i < DT; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = row0 + (e >> 1) * 8;
      const int d = i * 8 + 2 * (lane & 3) + (e & 1);
      so[(warp * 16 + r) * HEAD + d] = o[i][e] * f[e >> 1];
    }
  }
  __syncthreads();

  const bool single = nsplit == 1;
  const std::int64_t part_row =
      (static_cast<std::int64_t>(s) * p.max_splits + split) * p.num_heads;
  for (int i = tid; i < p.gqa * HEAD; i += kDecodeThreads) {
    const int r = i / HEAD, d = i % HEAD;
    const int h = g * p.gqa + r;
    float acc = 0.f;
#pragma unroll
    for (int w = 0; w < 4; ++w) acc += so[(w * 16 + r) * HEAD + d];
    float M = fin[r], L = fin[16 + r];
    if (single) {
      if (p.sinks != nullptr) {
        const float sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
        const float M2 = fmaxf(M, sk);
        acc *= __expf(M - M2);
        L = L * __expf(M - M2) + __expf(sk - M2);
        M = M2;
      }
      T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok +
               static_cast<std::int64_t>(h) * p.o_head;
      out[d] = float_to_elem<T>(acc / L);
      if (d == 0 && p.lse != nullptr)
        p.lse[static_cast<std::int64_t>(q0) * p.l_tok + static_cast<std::int64_t>(h) * p.l_head] =
            M + __logf(L);
    } else {
      p.part_o[(part_row + h) * HEAD + d] = acc / L;
      if (d == 0) p.part_lse[part_row + h] = M + __logf(L);
    }
  }
}

/// Combine the splits of each (decode sequence, query head): a fixed-order log-sum-exp merge
/// (deterministic), adding the sink once.
template <class T, int HEAD>
__global__ void __launch_bounds__(HEAD) decode_merge_kernel(const DecodeParams p) {
  const int h = blockIdx.x, s = blockIdx.y, d = threadIdx.x;
  const int q0 = p.qsl[s * p.qsl_stride];
  if (p.qsl[(s + 1) * p.qsl_stride] - q0 != 1) return;
  const int len = p.seq_lens[s * p.sl_stride];
  int start, valid_lo, end, nsplit;
  split_range(p, len, 0, &start, &valid_lo, &end, &nsplit);
  if (nsplit <= 1) return;  // the split kernel wrote the output itself
  const std::int64_t base = static_cast<std::int64_t>(s) * p.max_splits * p.num_heads + h;
  float M = -INFINITY;
  for (int i = 0; i < nsplit; ++i) M = fmaxf(M, p.part_lse[base + static_cast<std::int64_t>(i) * p.num_heads]);
  float sk = -INFINITY;
  if (p.sinks != nullptr) {
    sk = p.sinks[static_cast<std::int64_t>(h) * p.sinks_stride];
    M = fmaxf(M, sk);
  }
  float den = sk == -INFINITY ? 0.f : __expf(sk - M);
  float acc = 0.f;
  for (int i = 0; i < nsplit; ++i) {
    const std::int64_t row = base + static_cast<std::int64_t>(i) * p.num_heads;
    const float w = __expf(p.part_lse[row] - M);
    den += w;
    acc += w * p.part_o[row * HEAD + d];
  }
  T* out = static_cast<T*>(p.out) + static_cast<std::int64_t>(q0) * p.o_tok +
           static_cast<std::int64_t>(h) * p.o_head;
  out[d] = float_to_elem<T>(acc / den);
  if (d == 0 && p.lse != nullptr)
    p.lse[static_cast<std::int64_t>(q0) * p.l_tok + static_cast<std::int64_t>(h) * p.l_head] =
        M + __logf(den);
}

template <class T, int HEAD, bool SPLIT_K, bool SPLIT_V>
Status launch(const DecodeParams& p, int num_splits, int num_kv_heads, int num_seqs,
              cudaStream_t stream) {
  constexpr int STAGES = HEAD <= 64 ? 4 : 3;
  static_assert(STAGES == (HEAD <= 64 ? 4 : 3), "keep in sync with decode_mma_stages");
  auto kernel = decode_mma_kernel<T, HEAD, SPLIT_K, SPLIT_V, STAGES>;
  const int smem = static_cast<int>(decode_mma_smem_bytes(HEAD));
  // The attribute is per function and per device; setting it is not a stream operation, so
  // it is legal during graph capture, and cheap enough to repeat.
  PA_CUDA_RETURN(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
                 "decode_mma: cudaFuncSetAttribute");
  const dim3 grid(num_splits, num_kv_heads, num_seqs);
  kernel<<<grid, kDecodeThreads, smem, stream>>>(p);
  PA_CUDA_RETURN(cudaGetLastError(), "decode_mma: kernel launch");
  if (num_splits > 1) {
    decode_merge_kernel<T, HEAD><<<dim3(p.num_heads, num_seqs), HEAD, 0, stream>>>(p);
    PA_CUDA_RETURN(cudaGetLastError(), "decode_mma: merge launch");
  }
  return Status::Ok();
}

template <class T, int HEAD>
Status launch_layout(const DecodeParams& p, KVLayout layout, int num_splits, int num_kv_heads,
                     int num_seqs, cudaStream_t stream) {
  if (layout == KVLayout::kSplit)
    return launch<T, HEAD, true, true>(p, num_splits, num_kv_heads, num_seqs, stream);
  return launch<T, HEAD, false, false>(p, num_splits, num_kv_heads, num_seqs, stream);
}

bool aligned16(const void* ptr) { return (reinterpret_cast<std::uintptr_t>(ptr) & 15u) == 0; }

}  // namespace

bool decode_mma_supported(const ProblemDesc& pr, std::string* why_not) {
  if (pr.batch.num_prefill_seqs > 0) {
    if (why_not) *why_not = "the batch has prefill chunks";
    return false;
  }
  return decode_mma_rows_supported(pr, why_not);
}

bool decode_mma_rows_supported(const ProblemDesc& pr, std::string* why_not) {
  auto no = [&](const char* why) {
    if (why_not) *why_not = why;
    return false;
  };
  if (pr.device.type != DeviceType::kCUDA) return no("not a CUDA device");
  if (pr.batch.num_decode_seqs == 0) return no("the batch has no decode rows");
  if (pr.q_dtype != DType::kFloat16 && pr.q_dtype != DType::kBFloat16)
    return no("query dtype is not fp16/bf16");
  if (pr.cache_dtype != pr.q_dtype) return no("cache dtype differs from the query dtype");
  if (pr.head_size != 64 && pr.head_size != 128) return no("head_size is not 64 or 128");
  if (pr.gqa_ratio() > 16) return no("GQA ratio above 16");
  if (pr.layout == KVLayout::kSplit && pr.block_size % 8 != 0)
    return no("split layout with block_size % 8 != 0");
  if (pr.batch.num_seqs > 65535) return no("more than 65535 sequences");
  return true;
}

bool decode_mma_aligned_strides(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views) {
    for (int d = 0; d + 1 < v->ndim; ++d)
      if (v->shape[d] > 1 && v->strides[d] % 8 != 0) return false;
  }
  return true;
}

bool decode_mma_aligned(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views)
    if (!aligned16(v->data)) return false;
  return decode_mma_aligned_strides(args);
}

int decode_mma_chunk(const ProblemDesc& pr, int num_units, std::int64_t max_smem_per_block,
                     int forced_splits, int* num_splits) {
  const std::int64_t smem = decode_mma_smem_bytes(pr.head_size);
  // CTAs per SM by shared memory (1 KB reserved per CTA by the hardware), at most 4.
  const std::int64_t per_sm =
      std::clamp<std::int64_t>((max_smem_per_block + 1024) / (smem + 1024), 1, 4);
  const std::int64_t slots = std::max<std::int64_t>(1, num_units) * per_sm;
  // Key range of the longest sequence as the kernel cuts it: [lo rounded down to 64, seq_len).
  std::int64_t longest = std::max(1, pr.batch.max_seq_len);
  std::int64_t total = std::max<std::int64_t>(1, pr.batch.total_kv_tokens);
  if (pr.sliding_window > 0) {
    longest = std::min<std::int64_t>(longest, pr.sliding_window + kDecodeTileTokens - 1);
    total = std::min<std::int64_t>(total, longest * std::max(1, pr.batch.num_decode_seqs));
  }
  auto round_up = [](std::int64_t v, std::int64_t m) { return (v + m - 1) / m * m; };
  std::int64_t chunk;
  if (forced_splits > 0) {
    chunk = round_up((longest + forced_splits - 1) / forced_splits, kDecodeTileTokens);
  } else {
    const std::int64_t target = std::max<std::int64_t>(
        kMinChunkTokens, total * pr.num_kv_heads / (slots * kWaves));
    const std::int64_t n = std::max<std::int64_t>(1, (longest + target / 2) / target);
    chunk = std::max<std::int64_t>(kMinChunkTokens,
                                   round_up((longest + n - 1) / n, kDecodeTileTokens));
  }
  chunk = std::max<std::int64_t>(
      chunk, round_up((longest + kMaxDecodeSplits - 1) / kMaxDecodeSplits, kDecodeTileTokens));
  chunk = std::min<std::int64_t>(chunk, round_up(longest, kDecodeTileTokens));
  chunk = std::max<std::int64_t>(chunk, kDecodeTileTokens);
  // The kernel cuts [lo rounded down to 64, seq_len) into ceil(range / chunk) splits; a window
  // start inside a tile adds at most one tile to the range, which `longest` already counts.
  *num_splits = static_cast<int>((longest + chunk - 1) / chunk);
  return static_cast<int>(chunk);
}

std::size_t decode_mma_workspace(int num_seqs, int num_splits, int num_heads, int head_size) {
  if (num_splits <= 1) return 0;
  const std::size_t rows = static_cast<std::size_t>(num_seqs) * num_splits * num_heads;
  const std::size_t lse_bytes = (rows * sizeof(float) + 255) / 256 * 256;
  return lse_bytes + rows * head_size * sizeof(float);
}

Status decode_mma_run(const AttentionArgs& args, int block_size, int chunk_tokens,
                      int num_splits, void* workspace, Stream stream) {
  const KVCache& c = args.cache;
  DecodeParams p{};
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
  p.k = c.key.data;
  p.v = c.value.data;
  const std::int64_t* ks = c.key.strides;
  const std::int64_t* vs = c.value.strides;
  switch (c.layout) {
    case KVLayout::kSplit:  // key [b, g, d/x, t, x], value [b, g, d, t]
      p.k_blk = ks[0]; p.k_head = ks[1]; p.k_chunk = ks[2]; p.k_tok = ks[3];
      p.v_blk = vs[0]; p.v_head = vs[1]; p.v_dim = vs[2]; p.v_tok = 1; p.v_chunk = 0;
      break;
    case KVLayout::kNHD:  // [b, t, g, d]
      p.k_blk = ks[0]; p.k_tok = ks[1]; p.k_head = ks[2]; p.k_chunk = 8;
      p.v_blk = vs[0]; p.v_tok = vs[1]; p.v_head = vs[2]; p.v_chunk = 8;
      break;
    case KVLayout::kHND:  // [b, g, t, d]
      p.k_blk = ks[0]; p.k_head = ks[1]; p.k_tok = ks[2]; p.k_chunk = 8;
      p.v_blk = vs[0]; p.v_head = vs[1]; p.v_tok = vs[2]; p.v_chunk = 8;
      break;
  }
  p.block_table = static_cast<const int*>(args.block_table.data);
  p.bt_seq = args.block_table.strides[0];
  p.bt_blk = args.block_table.strides[1];
  p.seq_lens = static_cast<const int*>(args.seq_lens.data);
  p.sl_stride = args.seq_lens.strides[0];
  p.qsl = static_cast<const int*>(args.query_start_loc.data);
  p.qsl_stride = args.query_start_loc.strides[0];
  const int num_heads = static_cast<int>(args.query.shape[1]);
  const int head = static_cast<int>(args.query.shape[2]);
  const int num_kv_heads = c.layout == KVLayout::kNHD ? static_cast<int>(c.key.shape[2])
                                                      : static_cast<int>(c.key.shape[1]);
  p.num_heads = num_heads;
  p.gqa = num_heads / num_kv_heads;
  p.block_size = block_size;
  p.scale = args.params.scale;
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
  const bool bf16 = args.query.dtype == DType::kBFloat16;
  if (head == 64)
    return bf16 ? launch_layout<__nv_bfloat16, 64>(p, c.layout, num_splits, num_kv_heads, num_seqs, st)
                : launch_layout<__half, 64>(p, c.layout, num_splits, num_kv_heads, num_seqs, st);
  return bf16 ? launch_layout<__nv_bfloat16, 128>(p, c.layout, num_splits, num_kv_heads, num_seqs, st)
              : launch_layout<__half, 128>(p, c.layout, num_splits, num_kv_heads, num_seqs, st);
}

}  // namespace pagedattn::cuda
