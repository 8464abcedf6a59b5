// Planning a configuration of the CLI on shapes alone (no tensor memory), so that `explain`
// can answer and `verify` can reject what the library would reject before either allocates
// anything that grows with a flag.
#pragma once

#include "pagedattn/pagedattn.h"
#include "src/testing/harness.h"

namespace pagedattn::cli {

/// What plan_attention decides for `c` on `c.device`, and the cache view it planned for.
struct ShapePlan {
  KVCache cache;
  AttentionPlan plan;
};

/// Plan `c` from its shapes and lengths only: every tensor view has null data, and the host
/// block table is a [num_seqs, max_blocks] view of one int32 (block 0) with strides 0, which
/// the planner's checks read as a valid table: the block ids do not influence the decision,
/// and a real table of a 2^31-token sequence would take GiBs. The cache has as many blocks as
/// the sequences need (at least 1); `with_lse` requests the log-sum-exp output (run_case does,
/// `run` and `explain` do not). Memory used: O(number of sequences).
/// Errors: kInvalidArgument when `check_memory` is set and the tensors the configuration
/// describes (query, output, the cache's K and V with their padding) would take more than this
/// machine's physical memory (the message names the flags that size them; an assumed device's
/// decision, which allocates nothing here, passes false), or when the sequence count or the token count
/// passes int32; then those of make_kv_cache and plan_attention (kInvalidArgument /
/// kUnsupported naming the argument, kDeviceUnavailable).
Result<ShapePlan> plan_on_shapes(const testing::CaseConfig& c, bool with_lse,
                                 bool check_memory = true);

}  // namespace pagedattn::cli
