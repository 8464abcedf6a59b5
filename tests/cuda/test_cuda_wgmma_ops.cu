// The wgmma building blocks of the Hopper prefill kernel (src/cuda/prefill/wgmma_util.cuh) on
// their own, so that a layout or descriptor mistake shows here with a readable diagnosis
// rather than as a wrong attention output: one warpgroup computes
//   S = A B^T  (64 x 128 = 64 x 128 by 128 x 128, both operands K-major in shared memory),
//   O = P V    (64 x 128 = 64 x 128 by 128 x 128, P from registers, V N-major in shared memory)
//   and the same O with V kept transposed (V^T K-major: the split layout's value tile)
// on small integers (exact in bf16 and fp32) and the results are compared exactly with the
// host. Skips without a compute capability 9.0 GPU.
#include <gtest/gtest.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "src/cuda/common/mma_common.cuh"
#include "src/cuda/prefill/wgmma_util.cuh"

namespace {

using namespace pagedattn::cuda;

constexpr int M = 64, N = 128, K = 128;

// a: [M][K], b: [N][K], p: [M][N], v: [N][K] (row-major, bf16); s, o: [M][N], [M][K] fp32.
__global__ void wgmma_probe(const __nv_bfloat16* a, const __nv_bfloat16* b,
                            const __nv_bfloat16* p, const __nv_bfloat16* v, float* s, float* o,
                            float* o_kmajor) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) __nv_bfloat16 sa[M * K];
  __shared__ __align__(1024) __nv_bfloat16 sb[N * K];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < M * K / 8; i += 128) {
    const int r = i / (K / 8), c = i % (K / 8);
    *reinterpret_cast<uint4*>(sa + wgmma::tile_off(r, c, M)) =
        *reinterpret_cast<const uint4*>(a + r * K + c * 8);
  }
  for (int i = tid; i < N * K / 8; i += 128) {
    const int r = i / (K / 8), c = i % (K / 8);
    *reinterpret_cast<uint4*>(sb + wgmma::tile_off(r, c, N)) =
        *reinterpret_cast<const uint4*>(b + r * K + c * 8);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  wgmma::fence();
  for (int ks = 0; ks < K / 16; ++ks) {
    const std::uint32_t off = (ks >> 2) * 128 * M + (ks & 3) * 32;
    const std::uint32_t offb = (ks >> 2) * 128 * N + (ks & 3) * 32;
    wgmma::ss<__nv_bfloat16, N>(d, wgmma::desc(smem_addr(sa) + off, 16, 1024),
                                wgmma::desc(smem_addr(sb) + offb, 16, 1024), ks > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(d);
  for (int i = 0; i < N / 2; ++i) {
    const int row = warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
    const int col = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
    s[row * N + col] = d[i];
  }
  __syncthreads();
  // V: [N tokens][K dims] into the token-row tile (the layout the prefill kernel uses).
  for (int i = tid; i < N * K / 8; i += 128) {
    const int r = i / (K / 8), c = i % (K / 8);
    *reinterpret_cast<uint4*>(sb + wgmma::tile_off(r, c, N)) =
        *reinterpret_cast<const uint4*>(v + r * K + c * 8);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  float acc[K / 2];
  for (int i = 0; i < K / 2; ++i) acc[i] = 0.f;
  unsigned pa[N / 16][4];
  for (int kk = 0; kk < N / 16; ++kk) {
    const int r0 = warp * 16 + (lane >> 2), c0 = kk * 16 + 2 * (lane & 3);
    auto pk = [&](int r, int c) {
      return *reinterpret_cast<const unsigned*>(p + r * N + c);
    };
    pa[kk][0] = pk(r0, c0);
    pa[kk][1] = pk(r0 + 8, c0);
    pa[kk][2] = pk(r0, c0 + 8);
    pa[kk][3] = pk(r0 + 8, c0 + 8);
  }
  wgmma::fence_operand(acc);
  wgmma::fence();
  for (int kk = 0; kk < N / 16; ++kk)
    wgmma::rs<__nv_bfloat16, K, 1>(acc, pa[kk],
                                   wgmma::desc(smem_addr(sb) + kk * 2048, N * 128, 1024), 1);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(acc);
  for (int i = 0; i < K / 2; ++i) {
    const int row = warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
    const int col = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
    o[row * K + col] = acc[i];
  }
  __syncthreads();
  // The same O = P V with V kept transposed, V^T [K dims][N tokens] in the tile layout (the
  // split layout's value tile): K-major B, no transpose bit.
  for (int i = tid; i < K * N / 8; i += 128) {
    const int d = i / (N / 8), c = i % (N / 8);
    __nv_bfloat16 chunk[8];
    for (int e = 0; e < 8; ++e) chunk[e] = v[(c * 8 + e) * K + d];
    *reinterpret_cast<uint4*>(sb + wgmma::tile_off(d, c, K)) =
        *reinterpret_cast<const uint4*>(chunk);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  for (int i = 0; i < K / 2; ++i) acc[i] = 0.f;
  wgmma::fence_operand(acc);
  wgmma::fence();
  for (int kk = 0; kk < N / 16; ++kk)
    wgmma::rs<__nv_bfloat16, K, 0>(
        acc, pa[kk], wgmma::desc(smem_addr(sb) + (kk >> 2) * (K * 128) + (kk & 3) * 32, 16, 1024),
        1);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(acc);
  for (int i = 0; i < K / 2; ++i) {
    const int row = warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
    const int col = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
    o_kmajor[row * K + col] = acc[i];
  }
#elif defined(__CUDA_ARCH__)
  // Built without sm_90a features (an arch list without "90a"): fail loudly, never return
  // garbage.
  __trap();
#endif
}

// O [64 x D] = P [64 x T] V [T x D] with V kept transposed (V^T [D rows][T tokens] in the tile
// layout, column blocks of 64 tokens at a stride of D * 128 bytes) and read K-major, for
// D != T: the split layout's value tiles of heads 64 and 256 (a stride of T * 128 bytes, or
// the rows of tile_off taken as T, would pass a square probe).
template <int D, int T>
__global__ void pv_kmajor_probe(const __nv_bfloat16* p, const __nv_bfloat16* v, float* o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(1024) __nv_bfloat16 sb[D * T];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int i = tid; i < D * T / 8; i += 128) {
    const int d = i / (T / 8), c = i % (T / 8);
    __nv_bfloat16 chunk[8];
    for (int e = 0; e < 8; ++e) chunk[e] = v[(c * 8 + e) * D + d];
    *reinterpret_cast<uint4*>(sb + wgmma::tile_off(d, c, D)) =
        *reinterpret_cast<const uint4*>(chunk);
  }
  wgmma::fence_proxy_async();
  __syncthreads();
  unsigned pa[T / 16][4];
  for (int kk = 0; kk < T / 16; ++kk) {
    const int r0 = warp * 16 + (lane >> 2), c0 = kk * 16 + 2 * (lane & 3);
    auto pk = [&](int r, int c) { return *reinterpret_cast<const unsigned*>(p + r * T + c); };
    pa[kk][0] = pk(r0, c0);
    pa[kk][1] = pk(r0 + 8, c0);
    pa[kk][2] = pk(r0, c0 + 8);
    pa[kk][3] = pk(r0 + 8, c0 + 8);
  }
  float acc[D / 2];
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.f;
  wgmma::fence_operand(acc);
  wgmma::fence();
  for (int kk = 0; kk < T / 16; ++kk)
    wgmma::rs<__nv_bfloat16, D, 0>(
        acc, pa[kk], wgmma::desc(smem_addr(sb) + (kk >> 2) * (D * 128) + (kk & 3) * 32, 16, 1024),
        1);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(acc);
  for (int i = 0; i < D / 2; ++i) {
    const int row = warp * 16 + (lane >> 2) + 8 * ((i >> 1) & 1);
    const int col = (i >> 2) * 8 + 2 * (lane & 3) + (i & 1);
    o[row * D + col] = acc[i];
  }
#elif defined(__CUDA_ARCH__)
  __trap();
#endif
}

bool have_sm90() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    return false;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return false;
  return prop.major == 9 && prop.minor == 0;
}

TEST(CudaWgmmaOps, SharedAndRegisterOperandsMatchHost) {
  if (!have_sm90()) GTEST_SKIP() << "no compute capability 9.0 GPU";
  std::vector<float> fa(M * K), fb(N * K), fp(M * N), fv(N * K);
  std::uint32_t st = 12345;
  auto small = [&]() {
    st = st * 1664525u + 1013904223u;
    return static_cast<float>(static_cast<int>((st >> 24) % 5) - 2);
  };
  for (auto* vec : {&fa, &fb, &fp, &fv})
    for (float& x : *vec) x = small();
  auto to_bf = [](const std::vector<float>& f) {
    std::vector<__nv_bfloat16> h(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) h[i] = __float2bfloat16(f[i]);
    return h;
  };
  __nv_bfloat16 *da, *db, *dp, *dv;
  float *ds, *dout, *dout_k;
  ASSERT_EQ(cudaMalloc(&da, M * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&db, N * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dp, M * N * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dv, N * K * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&ds, M * N * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, M * K * 4), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout_k, M * K * 4), cudaSuccess);
  cudaMemcpy(da, to_bf(fa).data(), M * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, to_bf(fb).data(), N * K * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, to_bf(fp).data(), M * N * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, to_bf(fv).data(), N * K * 2, cudaMemcpyHostToDevice);
  cudaMemset(ds, 0xff, M * N * 4);
  cudaMemset(dout, 0xff, M * K * 4);
  cudaMemset(dout_k, 0xff, M * K * 4);
  wgmma_probe<<<1, 128>>>(da, db, dp, dv, ds, dout, dout_k);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> hs(M * N), ho(M * K), hok(M * K);
  cudaMemcpy(hs.data(), ds, M * N * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(ho.data(), dout, M * K * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(hok.data(), dout_k, M * K * 4, cudaMemcpyDeviceToHost);
  for (void* ptr : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dp),
                    static_cast<void*>(dv), static_cast<void*>(ds), static_cast<void*>(dout),
                    static_cast<void*>(dout_k)})
    cudaFree(ptr);
  int bad_s = 0, bad_o = 0, bad_ok = 0;
  std::string first_s, first_o, first_ok;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      float ref = 0;
      for (int k = 0; k < K; ++k) ref += fa[i * K + k] * fb[j * K + k];
      if (hs[i * N + j] != ref && bad_s++ == 0)
        first_s = "S(" + std::to_string(i) + "," + std::to_string(j) + ") = " +
                  std::to_string(hs[i * N + j]) + ", expected " + std::to_string(ref);
    }
  for (int i = 0; i < M; ++i)
    for (int d = 0; d < K; ++d) {
      float ref = 0;
      for (int t = 0; t < N; ++t) ref += fp[i * N + t] * fv[t * K + d];
      if (ho[i * K + d] != ref && bad_o++ == 0)
        first_o = "O(" + std::to_string(i) + "," + std::to_string(d) + ") = " +
                  std::to_string(ho[i * K + d]) + ", expected " + std::to_string(ref);
      if (hok[i * K + d] != ref && bad_ok++ == 0)
        first_ok = "O(" + std::to_string(i) + "," + std::to_string(d) + ") = " +
                   std::to_string(hok[i * K + d]) + ", expected " + std::to_string(ref);
    }
  EXPECT_EQ(bad_s, 0) << "S = A B^T (ss, K-major): " << first_s;
  EXPECT_EQ(bad_o, 0) << "O = P V (rs, V N-major): " << first_o;
  EXPECT_EQ(bad_ok, 0) << "O = P V (rs, V^T K-major, the split layout's tile): " << first_ok;
}

template <int D, int T>
void check_pv_kmajor() {
  std::vector<float> fp(64 * T), fv(T * D);
  std::uint32_t st = 777u + D + T;
  for (auto* vec : {&fp, &fv})
    for (float& x : *vec) {
      st = st * 1664525u + 1013904223u;
      x = static_cast<float>(static_cast<int>((st >> 24) % 5) - 2);
    }
  std::vector<__nv_bfloat16> hp(fp.size()), hv(fv.size());
  for (std::size_t i = 0; i < fp.size(); ++i) hp[i] = __float2bfloat16(fp[i]);
  for (std::size_t i = 0; i < fv.size(); ++i) hv[i] = __float2bfloat16(fv[i]);
  __nv_bfloat16 *dp = nullptr, *dv = nullptr;
  float* dout = nullptr;
  ASSERT_EQ(cudaMalloc(&dp, hp.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dv, hv.size() * 2), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&dout, 64 * D * 4), cudaSuccess);
  cudaMemcpy(dp, hp.data(), hp.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dv, hv.data(), hv.size() * 2, cudaMemcpyHostToDevice);
  cudaMemset(dout, 0xff, 64 * D * 4);
  pv_kmajor_probe<D, T><<<1, 128>>>(dp, dv, dout);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> ho(64 * D);
  cudaMemcpy(ho.data(), dout, ho.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(dp);
  cudaFree(dv);
  cudaFree(dout);
  int bad = 0;
  std::string first;
  for (int i = 0; i < 64; ++i)
    for (int d = 0; d < D; ++d) {
      float ref = 0;
      for (int t = 0; t < T; ++t) ref += fp[i * T + t] * fv[t * D + d];
      if (ho[i * D + d] != ref && bad++ == 0)
        first = "O(" + std::to_string(i) + "," + std::to_string(d) + ") = " +
                std::to_string(ho[i * D + d]) + ", expected " + std::to_string(ref);
    }
  EXPECT_EQ(bad, 0) << "V^T K-major, " << D << " dims x " << T << " tokens: " << first;
}

TEST(CudaWgmmaOps, KMajorValueTileOfOtherShapesMatchesHost) {
  if (!have_sm90()) GTEST_SKIP() << "no compute capability 9.0 GPU";
  check_pv_kmajor<64, 128>();   // head 64, 128-token tiles
  check_pv_kmajor<256, 64>();   // head 256, 64-token tiles
}

}  // namespace
