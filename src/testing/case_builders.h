// Building blocks of the named cases, shared by cases.cpp (the matrix), cases_named.cpp (the
// fault classes) and cases_kernel_paths.cpp (the cases aimed at each CUDA kernel path);
// internal to src/testing.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "src/testing/harness.h"

namespace pagedattn::testing::detail {

/// Every cache layout, in the matrix's axis order.
inline constexpr KVLayout kLayouts[] = {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND};

/// Set the case's (seq_len, query_len) pairs.
void set_lengths(CaseConfig* c, const std::vector<std::pair<int, int>>& seqs);

/// One decode fast-path case (the dmma and dsmall cases of add_named_cases).
struct DecodeCase {
  KVLayout layout;
  int block, head, heads, kv_heads;
  DType dt;
  int feature;  // set_decode_features
  std::int64_t pad;
  int splits;
  std::vector<std::pair<int, int>> lens = {};  // (seq_len, query_len); empty: the dmma lengths
  std::vector<int> planned = {};               // CaseConfig::planned_seq_lens
};

/// The feature sets of the decode fast-path cases: 0 none, 1 softcap + ALiBi + sinks,
/// 2 window 100, 3 window 100 + sinks; with padded pages and forced splits (0 = planned).
void set_decode_features(CaseConfig* c, int feature, std::int64_t pad, int splits);

/// A case of this shape with every other field at its default.
CaseConfig base(Device device, KVLayout layout, int bs, int head_size, int heads, int kv_heads,
                DType dtype, DType kv);

/// Name and seed from the configuration (the seed from the name, so that adding a case never
/// changes another case's inputs).
CaseConfig finish(CaseConfig c);

/// The fault classes of DESIGN.md §5 as named cases (cases_named.cpp), followed by
/// add_kernel_path_cases. `quick` keeps one small case per class.
void add_named_cases(Device dev, bool quick, std::vector<CaseConfig>* out);

/// The named cases aimed at each CUDA kernel path (decode fast path, small-call kernel,
/// head-64 pairs, non-finite inputs through every kernel; cases_kernel_paths.cpp). On the CPU
/// these are ordinary cases.
void add_kernel_path_cases(Device dev, bool quick, std::vector<CaseConfig>* out);

}  // namespace pagedattn::testing::detail
