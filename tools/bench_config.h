// The configurations `pagedattn bench` times besides its named workloads: `--config` (one
// configuration in the flags of `pagedattn verify`) and `--matrix` (dtype x head size x
// layout x batch shape at the W1 shape), as bench workloads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/workloads.h"
#include "pagedattn/status.h"
#include "src/testing/harness.h"

namespace pagedattn::cli {

/// One row of `--config` or `--matrix`.
struct BenchRow {
  /// "config-1", or "<dtype>/h<head>/<layout>/<lengths>" ("bf16/h128/nhd/64x4096").
  std::string name;
  testing::CaseConfig config;  // on cuda:0
  /// The name of the row with the same tokens spread evenly over the batch, for a skewed
  /// matrix row (its time divided by that row's is printed); empty otherwise.
  std::string even_row;
};

/// "64x4096" -> 64 entries of 4096; terms separated by ',' or '+' ("1x32768+63x512"), each
/// "L" or "NxL" (N copies of L). The result is a comma list for parse_int_list, which checks
/// the numbers. Errors: kInvalidArgument naming `flag` for a malformed term or more than 2^24
/// entries.
Result<std::string> expand_lengths(const std::string& text, const char* flag);

/// Parse the text of one `--config` (the configuration flags of `pagedattn verify`, e.g.
/// "--head-size 256 --kv-dtype fp8_e4m3 --seq-lens 1x32768,63x512") over the W1 defaults
/// (32/8 heads, head 128, block 16, bf16, nhd, 64 x 4096 decode). --seq-lens and
/// --query-lens also take NxL terms (expand_lengths). `bench_seed` applies unless the text has
/// --seed; `bench_splits` (> 0, bench's --splits) unless it has --num-splits (both given and
/// different: an error). --device and --json belong to bench itself and are refused.
/// Errors: kInvalidArgument naming "--config" and the flag.
Result<testing::CaseConfig> parse_bench_config(const std::string& text, std::uint64_t bench_seed,
                                               int bench_splits);

/// The rows of `--matrix` in order: dtype (bf16, fp16, fp8_e4m3, fp8_e5m2 caches; the query is
/// bf16, fp16 for the fp16 cache) x head size (64, 80, 96, 128, 256, 512) x layout (nhd,
/// split) x lengths (64x4096 = W1; 64x1016 and 1x32768+63x512 = W6, the same 65024 tokens
/// even and skewed; 256x1022 and 255x512+1x131072, 261632 tokens even and skewed), all with
/// 32/8 heads, block 16, decode.
std::vector<BenchRow> matrix_rows(std::uint64_t seed, int splits);

/// Rows whose name contains every comma-separated term of `filter` (all rows for "").
std::vector<BenchRow> filter_rows(const std::vector<BenchRow>& rows, const std::string& filter);

/// The bench workload of `c` (CaseConfig::scale resolved as the harness does, fp8 scales "0 =
/// derived" read as 1: the bench stores its random values in the cache as they are).
bench::Workload to_workload(const testing::CaseConfig& c, const std::string& name,
                            const std::string& group);

/// The case configuration of a named bench workload (the inverse of to_workload, with
/// `plan`), for planning it on shapes (`bench --list --assume-device`).
testing::CaseConfig to_case_config(const bench::Workload& w, const PlanOptions& plan);

}  // namespace pagedattn::cli
