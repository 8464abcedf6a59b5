// Launcher of the CUDA tiled attention kernel: host-only declaration (no CUDA headers), called
// by run_attention (src/cuda/backend/attention.cu) for the rows the other kernels do not take.
#pragma once

#include <cstdint>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "src/cuda/tiled/cuda_config.h"

namespace pagedattn::cuda {

/// Run the tiled kernel on `stream` for the rows of the sequences with min_query_len <=
/// query_len <= max_query_len (1, INT_MAX: every row; 2, INT_MAX: the prefill rows of a mixed
/// batch whose decode rows run on the decode fast path; 1, 1: the decode rows of a
/// batch-invariant mixed batch whose prefill rows run on a prefill kernel), `total_tiles`
/// query-row tiles of them (count_row_tiles): the tile prefix sums into the workspace's
/// tile_start slot, the kernel, and the split merge when cfg.num_splits > 1 (of those rows
/// only: the others' output is not written). The caller has made the device current and checked
/// cfg.smem.total <= `smem_optin` (the device's opt-in shared-memory limit per block, which
/// becomes the kernel's dynamic shared-memory attribute). `workspace` is laid out as `wsl`.
/// Errors: kUnsupported for a query dtype other than fp32/fp16/bf16, kInternal with the CUDA
/// error of a failed launch.
Status tiled_run(const AttentionArgs& args, const KVCacheGeometry& geometry,
                 const TiledConfig& cfg, const TiledWorkspace& wsl, std::int64_t total_tiles,
                 int min_query_len, int max_query_len, int smem_optin, void* workspace,
                 Stream stream);

}  // namespace pagedattn::cuda
