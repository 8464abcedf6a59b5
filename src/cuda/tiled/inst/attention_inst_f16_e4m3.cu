// Instantiations of the tiled attention kernel for __half queries with a e4m3 cache (one file
// per (query dtype, cache kind) so that the 9 groups compile in parallel).
#include "src/cuda/tiled/attention_kernel.cuh"

namespace pagedattn::cuda {
PAGEDATTN_DEFINE_LAUNCH_TILED(__half, kKvE4M3)
}  // namespace pagedattn::cuda
