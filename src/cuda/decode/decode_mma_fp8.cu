// The fp8-cache launches of the CUDA decode fast path (decode_mma_launch.cuh): in a TU of their
// own so that they compile in parallel with the 16-bit ones (decode_mma.cu).
#include <cuda_runtime.h>

#include "src/cuda/decode/decode_mma_launch.cuh"

namespace pagedattn::cuda::decode {

Status launch_fp8_call(const DecodeParams& p, int head, DType kv, KVLayout layout,
                       const DecodeGrid& gr, cudaStream_t stream) {
  if (head == 64) return launch_fp8<64>(p, kv, layout, gr, stream);
  if (head == 128) return launch_fp8<128>(p, kv, layout, gr, stream);
  if (head == 512) return launch_fp8_h512_call(p, kv, layout, gr, stream);
  return launch_fp8<256>(p, kv, layout, gr, stream);
}

namespace {

template <int HEAD, int KV>
int fp8_ctas(int gqa, bool split) {
  if constexpr (HEAD == 256) {
    return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV>()
                 : instance_ctas_per_sm<__half, HEAD, false, 1, KV>();
  } else {
    if (gqa > 8)
      return split ? instance_ctas_per_sm<__half, HEAD, true, 2, KV>()
                   : instance_ctas_per_sm<__half, HEAD, false, 2, KV>();
    constexpr int kOld = decode_mma_stages(HEAD, 1, 8, false);
    if (!decode_mma_fp8_tuned())
      return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV, kOld>()
                   : instance_ctas_per_sm<__half, HEAD, false, 1, KV, kOld>();
    return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV>()
                 : instance_ctas_per_sm<__half, HEAD, false, 1, KV>();
  }
}

template <int KV>
int fp8_ctas_kv(int head, int gqa, bool split) {
  if (head == 64) return fp8_ctas<64, KV>(gqa, split);
  if (head == 128) return fp8_ctas<128, KV>(gqa, split);
  return fp8_ctas<256, KV>(gqa, split);
}

}  // namespace

int fp8_ctas_per_sm(int head, int gqa, DType kv, KVLayout layout) {
  if (head == 512) return fp8_h512_ctas_per_sm(kv, layout);
  const bool split = layout == KVLayout::kSplit;
  return kv == DType::kFloat8E4M3 ? fp8_ctas_kv<kKvE4M3>(head, gqa, split)
                                  : fp8_ctas_kv<kKvE5M2>(head, gqa, split);
}

}  // namespace pagedattn::cuda::decode
