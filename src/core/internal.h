// Library-internal declarations shared by the core, the dispatcher and the backends.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "pagedattn/attention.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "pagedattn/write_kv.h"

namespace pagedattn {

/// One unit of CPU work: query rows [q_begin, q_end) of sequence `seq` against KV head
/// `kv_head` (all query heads of that KV head together, so each K/V element is read once).
struct CpuWorkItem {
  std::int32_t seq = 0;
  std::int32_t kv_head = 0;
  std::int64_t q_begin = 0;  // absolute query row (token index)
  std::int64_t q_end = 0;
};

struct AttentionPlan::State {
  ProblemDesc problem;
  KernelChoice choice;
  KVCacheGeometry geometry;
  PlanOptions options;
  std::size_t workspace_bytes = 0;
  /// block_table.shape[1] at plan time: run() must get the same width.
  std::int64_t block_table_width = 0;
  /// CPU backend: the work list, ordered longest first for load balance.
  std::vector<CpuWorkItem> cpu_work;
  /// Backend-private data (CUDA).
  std::shared_ptr<const void> backend;
};

}  // namespace pagedattn
