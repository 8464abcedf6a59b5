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

template <int HEAD, int KV, int RH>
int fp8_ctas(int gqa, bool split) {
  constexpr int S1 = decode_mma_stages(HEAD, 1, 8), S2 = decode_mma_stages(HEAD, 1, 16);
  if constexpr (HEAD == 256) {
    return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV, S1, RH>()
                 : instance_ctas_per_sm<__half, HEAD, false, 1, KV, S1, RH>();
  } else {
    if (gqa > 8)
      return split ? instance_ctas_per_sm<__half, HEAD, true, 2, KV, S2, RH>()
                   : instance_ctas_per_sm<__half, HEAD, false, 2, KV, S2, RH>();
    if constexpr (RH != 0)  // always the tuned stages (launch_fp8_layout)
      return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV, S1, RH>()
                   : instance_ctas_per_sm<__half, HEAD, false, 1, KV, S1, RH>();
    constexpr int kOld = decode_mma_stages(HEAD, 1, 8, false);
    if (!decode_mma_fp8_tuned())
      return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV, kOld>()
                   : instance_ctas_per_sm<__half, HEAD, false, 1, KV, kOld>();
    return split ? instance_ctas_per_sm<__half, HEAD, true, 1, KV>()
                 : instance_ctas_per_sm<__half, HEAD, false, 1, KV>();
  }
}

template <int KV, int HEAD>
int fp8_ctas_head(int head_size, int gqa, bool split) {
  if (head_size == HEAD) return fp8_ctas<HEAD, KV, 0>(gqa, split);
  return with_masked_head<decode_mma_masked_low(HEAD, true), HEAD>(
      head_size, 0, [&](auto rh) { return fp8_ctas<HEAD, KV, decltype(rh)::value>(gqa, split); });
}

template <int KV>
int fp8_ctas_kv(int head, int head_size, int gqa, bool split) {
  if (head == 64) return fp8_ctas<64, KV, 0>(gqa, split);
  if (head == 128) return fp8_ctas_head<KV, 128>(head_size, gqa, split);
  return fp8_ctas_head<KV, 256>(head_size, gqa, split);
}

}  // namespace

int fp8_ctas_per_sm(int head, int head_size, int gqa, DType kv, KVLayout layout) {
  if (head == 512) return fp8_h512_ctas_per_sm(kv, layout);
  const bool split = layout == KVLayout::kSplit;
  return kv == DType::kFloat8E4M3 ? fp8_ctas_kv<kKvE4M3>(head, head_size, gqa, split)
                                  : fp8_ctas_kv<kKvE5M2>(head, head_size, gqa, split);
}

}  // namespace pagedattn::cuda::decode
