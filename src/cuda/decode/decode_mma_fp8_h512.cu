// The fp8-cache launches of the decode fast path at head 512 (decode_mma_launch.cuh): a TU of
// its own, like the 16-bit head-512 one, so that its instances compile in parallel.
#include <cuda_runtime.h>

#include "src/cuda/decode/decode_mma_launch.cuh"

namespace pagedattn::cuda::decode {

Status launch_fp8_h512_call(const DecodeParams& p, DType kv, KVLayout layout,
                            const DecodeGrid& gr, cudaStream_t stream) {
  return launch_fp8<512>(p, kv, layout, gr, stream);
}

int fp8_h512_ctas_per_sm(DType kv, KVLayout layout) {
  const bool split = layout == KVLayout::kSplit;
  if (kv == DType::kFloat8E4M3)
    return split ? instance_ctas_per_sm<__half, 512, true, 1, kKvE4M3>()
                 : instance_ctas_per_sm<__half, 512, false, 1, kKvE4M3>();
  return split ? instance_ctas_per_sm<__half, 512, true, 1, kKvE5M2>()
               : instance_ctas_per_sm<__half, 512, false, 1, kKvE5M2>();
}

}  // namespace pagedattn::cuda::decode
