// The naive oracle (DESIGN.md §4): a direct transcription of the math of DESIGN.md §2, kept
// deliberately simple and separate from every fast path. Tests and `pagedattn verify` compare
// backends against it. CPU tensors only.
#pragma once

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn {

/// Attention by naive gather: for every row, read each allowed key through the block table,
/// accumulate in double, softmax in two passes. Same arguments and output shapes as
/// run_attention, except that `args.out` may have any float dtype (fp32 is what the tests use:
/// it receives the double result rounded once) and `args.lse` is fp32.
/// All tensors must be on the CPU. Validation as plan_attention (same messages).
Status reference_attention(const AttentionArgs& args);

/// write_kv semantics by plain loops (the writer oracle). CPU tensors only; same validation.
Status reference_write_kv(const TensorView& key, const TensorView& value,
                          const TensorView& slot_mapping, const KVCache& cache);

}  // namespace pagedattn
