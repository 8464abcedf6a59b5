// A test case (testing::CaseConfig) as fuzzer input bytes and back, so that the attention
// fuzzer explores the same space as the correctness matrix, starting from the matrix itself.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fuzz/fuzz_bytes.h"
#include "src/testing/harness.h"

namespace pagedattn::fuzz {

/// Bounds of what read_case draws: wide enough for the CPU matrix's cases (the seeds), and a
/// work bound (keys x query rows x heads x head size) that keeps an input to well under a
/// second under ASan.
inline constexpr int kMaxSeqs = 16;
inline constexpr int kMaxSeqLen = 8200;
inline constexpr int kMaxQueryLen = 1100;
inline constexpr int kMaxBlockSize = 2100;
inline constexpr int kMaxKVHeads = 32;
inline constexpr int kMaxGroup = 16;
inline constexpr int kMaxPad = 512;
inline constexpr std::int64_t kMaxWork = std::int64_t{1} << 25;

/// Read a CPU case from `in`. Every field is drawn, valid or not (head sizes that are not a
/// multiple of 8, query_len > seq_len, NaN scales...): the library must reject what it cannot
/// run. nullopt only for cases over the work bound (too slow to be worth an input).
std::optional<testing::CaseConfig> read_case(ByteReader& in);

/// Write `c` so that read_case returns it again. Returns nullptr, or the name of a field that
/// lies outside what read_case can produce (then what was written is of no use).
const char* write_case(const testing::CaseConfig& c, ByteWriter& out);

}  // namespace pagedattn::fuzz
