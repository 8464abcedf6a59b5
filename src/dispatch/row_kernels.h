// Which kernel runs which rows of a plan, as `pagedattn explain` (text and --json), `bench` and
// the Python package's explain() say it: one definition, so that the CLI and Python agree.
// Header-only; reads a KernelChoice and the batch summary only.
#pragma once

#include <string>

#include "pagedattn/select.h"

namespace pagedattn {

/// Kernels that run the decode rows and the prefill chunks of a plan. A CUDA plan on the tiled
/// kernel (a batch with prefill chunks) hands its decode rows to the decode fast path when
/// `decode_rows_fast_path` and its prefill chunks to the tensor-core prefill kernel
/// ("cuda_prefill_mma") when `prefill_rows_mma` (on Hopper "cuda_prefill_wgmma_ws", or
/// "cuda_prefill_wgmma" for its first version); decode rows off the fast path go with the
/// prefill rows, or in batch-invariant plans (`decode_rows_tiled`) stay on `kernel`. Every
/// other plan runs all rows on `kernel`.
struct RowKernels {
  std::string decode, prefill;
};
inline RowKernels row_kernels(const KernelChoice& c) {
  RowKernels r;
  r.prefill = c.kernel != KernelId::kCudaTiled || !c.prefill_rows_mma ? to_string(c.kernel)
              : c.prefill_rows_wgmma && c.prefill_rows_wgmma_ws          ? "cuda_prefill_wgmma_ws"
              : c.prefill_rows_wgmma                                     ? "cuda_prefill_wgmma"
                                                                         : "cuda_prefill_mma";
  r.decode = c.kernel == KernelId::kCudaTiled && c.decode_rows_fast_path
                 ? to_string(KernelId::kCudaDecodeMMA)
             : c.decode_rows_tiled ? to_string(c.kernel)
                                   : r.prefill;
  return r;
}

/// What a plan runs, in one line: the plan's kernel, or, where a CUDA plan on the tiled kernel
/// hands rows of the batch to other kernels, "decode rows: K1; prefill rows: K2" for the kinds
/// of row `batch` has (explain's "runs").
inline std::string runs_line(const KernelChoice& c, const BatchSummary& batch) {
  const bool any_decode = batch.num_decode_seqs > 0, any_prefill = batch.num_prefill_seqs > 0;
  const RowKernels rows = row_kernels(c);
  const std::string planned = to_string(c.kernel);
  const bool elsewhere = c.kernel == KernelId::kCudaTiled &&
                         ((any_decode && rows.decode != planned) ||
                          (any_prefill && rows.prefill != planned));
  if (!elsewhere) return planned;
  std::string runs;
  if (any_decode) runs = "decode rows: " + rows.decode;
  if (any_prefill) runs += (runs.empty() ? "" : "; ") + std::string("prefill rows: ") + rows.prefill;
  return runs;
}

}  // namespace pagedattn
