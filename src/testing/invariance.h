// Batch invariance as a test (PlanOptions::batch_invariant, DESIGN.md §3): one sequence's
// attention computed alone and inside a batch of other sequences must give the same output and
// LSE bits. Shared by the CPU and CUDA suites; the device is the config's.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn::testing {

struct InvarianceConfig {
  Device device = Device::cpu();
  KVLayout layout = KVLayout::kNHD;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_size = 72;
  int block_size = 16;
  DType dtype = DType::kFloat16;     // query / output
  DType kv_dtype = DType::kFloat16;  // == dtype or fp8
  int sliding_window = 0;
  float softcap = 0.0f;
  bool alibi = false;                // slopes 2^(-8 (h + 1) / H)
  bool sinks = false;                // sink logits 0.5 - 0.25 h
  PlanOptions plan;                  // batch_invariant is what the test is about
  /// (seq_len, query_len) of the sequence under test.
  std::pair<int, int> subject{3000, 1};
  /// (seq_len, query_len) of the batch's other sequences, which the subject joins at
  /// position `subject_index` (0..others.size()).
  std::vector<std::pair<int, int>> others{{100, 1}, {40000, 1}, {7, 1}};
  int subject_index = 1;
  std::uint64_t seed = 1;
};

struct InvarianceResult {
  Status status;                // non-ok: a call failed (the test should fail with it)
  bool out_equal = false;       // the subject's output rows, bit for bit
  bool lse_equal = false;       // and its LSE
  std::string detail;           // first differing element, for messages
  KernelChoice alone, batched;  // what ran
};

/// Run the subject alone and in the batch on config.device (each sequence's Q, K and V drawn
/// from its own seed, so the subject's inputs are the same in both runs; the K/V reach the
/// cache through write_kv), and compare the subject's rows bytewise.
InvarianceResult check_batch_invariance(const InvarianceConfig& config);

struct EachAloneResult {
  Status status;                // non-ok: a call failed
  int checked = 0;              // sequences run alone (those with query_len > 0)
  std::vector<int> differing;   // their indices in `batch` whose rows differ
  std::string detail;           // the first difference, for messages
  KernelChoice batched;         // what ran on the batch
};

/// Every sequence of `batch` ((seq_len, query_len) pairs, in batch order) alone against the
/// batch: one run of the whole batch, then one run per sequence with query_len > 0 by itself
/// (sequence i's inputs drawn from its own seed, so the same in both), each sequence's output
/// and LSE rows compared bytewise. Costs one batch run plus one run per sequence.
/// config.subject, config.others and config.subject_index are not used.
EachAloneResult check_each_sequence_alone(const InvarianceConfig& config,
                                          const std::vector<std::pair<int, int>>& batch);

}  // namespace pagedattn::testing
