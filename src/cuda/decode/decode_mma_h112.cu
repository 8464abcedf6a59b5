// Decode fast path, head 112 with 16-bit caches (decode_mma_heads.cuh): a TU of its own so
// that it compiles in parallel with the other heads.
#include "src/cuda/decode/decode_mma_heads.cuh"

namespace pagedattn::cuda::decode {

template Status launch_head_call<112>(const DecodeParams& p, bool bf16, KVLayout layout,
                                     const DecodeGrid& gr, cudaStream_t stream);

}  // namespace pagedattn::cuda::decode
