// The fp8-cache launches of the CUDA decode fast path (decode_mma_launch.cuh): in a TU of their
// own so that they compile in parallel with the 16-bit ones (decode_mma.cu).
#include <cuda_runtime.h>

#include "src/cuda/decode/decode_mma_launch.cuh"

namespace pagedattn::cuda::decode {

Status launch_fp8_call(const DecodeParams& p, int head, DType kv, KVLayout layout,
                       const DecodeGrid& gr, cudaStream_t stream) {
  if (head == 64) return launch_fp8<64>(p, kv, layout, gr, stream);
  if (head == 128) return launch_fp8<128>(p, kv, layout, gr, stream);
  return launch_fp8<256>(p, kv, layout, gr, stream);
}

}  // namespace pagedattn::cuda::decode
