// The bench's output check (`pagedattn bench --check`): before a workload is timed, one call's
// output is compared with the naive oracle (reference_attention) on the very data that is then
// timed, so that a fast number is never the number of a wrong kernel. The cache memory the
// call must not read (unused blocks, page padding, the slots past each sequence's end) holds
// NaN at that point (bench/runner.cpp), so an over-read shows as a NaN output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "bench/workloads.h"
#include "pagedattn/kv_cache.h"
#include "pagedattn/status.h"

namespace pagedattn::bench {

/// How much of the output is compared with the oracle.
enum class CheckMode : std::uint8_t {
  kNone,
  /// Every output element must be finite; the oracle recomputes the first, the longest and the
  /// last sequence (those with query rows), query heads 0 and num_heads - 1 of each (KV heads
  /// 0 and last, the first and the last head of their GQA groups). The longest sequence is
  /// the one a skewed batch splits.
  kSampled,
  /// Every element must be finite and every (sequence, query head) is recomputed.
  kFull,
  /// kFull when the oracle's work is small (check_mode_for), else kSampled.
  kAuto,
};
const char* to_string(CheckMode mode);
/// "none", "sampled", "full", "auto"; kInvalidArgument naming `flag` otherwise.
Result<CheckMode> parse_check_mode(const std::string& text, const char* flag);

/// kAuto resolved for `w`: kFull when the oracle's multiply-adds (query rows x keys x heads x
/// head_size x 2) stay under 2^31 and the sequences' cache blocks under 1 GiB of host memory,
/// else kSampled. Other modes are returned as given.
CheckMode check_mode_for(const Workload& w, CheckMode mode);

/// What the check compared and found.
struct CheckReport {
  CheckMode mode = CheckMode::kNone;
  bool pass = true;
  int seqs_checked = 0;
  int heads_checked = 0;         // query heads per checked sequence
  std::int64_t elements = 0;     // elements compared with the oracle
  double max_abs_error = 0;
  double worst_ratio = 0;        // max |out - ref| / (atol + rtol |ref|); pass needs <= 1
  std::string detail;            // the first failure, empty on a pass
  /// "pass sampled: 3 seqs x 2 heads, worst 0.12 of the tolerance".
  std::string summary() const;
};

/// The device-side call to check, and the host copies of its metadata.
struct CheckInputs {
  const Workload* workload = nullptr;
  /// The device cache the call read (views over device memory).
  KVCache cache;
  /// Host block table [num_seqs, max_blocks] of physical block ids, and query_start_loc.
  const std::int32_t* block_table = nullptr;
  std::int64_t max_blocks = 0;
  const std::int32_t* query_start_loc = nullptr;
  /// Device query and output [num_tokens, num_heads, head_size], dense, of workload->dtype.
  const void* query = nullptr;
  const void* out = nullptr;
  /// Device LSE [num_tokens, num_heads] fp32, when the call wrote one (null otherwise); it is
  /// checked as the output is (finite everywhere, the oracle's within the same tolerance).
  const void* lse = nullptr;
  /// Host ALiBi slopes / sink logits [num_heads] (empty when the feature is off).
  std::vector<float> alibi_slopes;
  std::vector<float> sinks;
  float scale = 0.0f;
  /// Copies `bytes` from the call's memory to the host; null = cuda::copy_to_host (tests pass
  /// memcpy to check a CPU-computed output).
  Status (*copy_to_host)(void* dst, const void* src, std::size_t bytes) = nullptr;
};

/// Compare the output of a finished call (the caller has synchronised) with the oracle, as
/// `mode` (not kNone; kAuto is resolved with check_mode_for) says. Host memory: the cache
/// blocks of the checked sequences plus query and output. The oracle runs on up to
/// hardware_concurrency threads, one (sequence, KV head or query head) each.
/// Errors: copy failures and oracle errors (a configuration the oracle rejects), as Status; a
/// mismatch is a report with pass = false, not an error.
Result<CheckReport> check_output(const CheckInputs& inputs, CheckMode mode);

}  // namespace pagedattn::bench
