// The 16-bit-cache launches of the decode fast path's heads between 64, 128 and 256
// (decode::launch_head_call): included only by decode_mma_h<HEAD>.cu, each of which
// instantiates one head, so that the instances compile in parallel and decode_mma.cu keeps
// its compile time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "src/cuda/decode/decode_mma_launch.cuh"

namespace pagedattn::cuda::decode {

template <int HEAD>
Status launch_head_call(const DecodeParams& p, bool bf16, KVLayout layout, const DecodeGrid& gr,
                        cudaStream_t stream) {
  static_assert(decode_mma_head_instance(HEAD), "a head size decode_mma_rows_supported takes");
  return bf16 ? launch_layout<__nv_bfloat16, HEAD>(p, layout, gr, stream)
              : launch_layout<__half, HEAD>(p, layout, gr, stream);
}

}  // namespace pagedattn::cuda::decode
