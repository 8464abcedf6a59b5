// Instantiations of the tiled attention kernel for float queries with a e5m2 cache (one file
// per (query dtype, cache kind) so that the 9 groups compile in parallel).
#include "src/cuda/tiled/attention_kernel.cuh"

namespace pagedattn::cuda {
PAGEDATTN_DEFINE_LAUNCH_TILED(float, kKvE5M2)
}  // namespace pagedattn::cuda
