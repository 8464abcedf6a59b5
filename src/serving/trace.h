// Serving traces: request arrival times and lengths (prompt tokens, generated tokens) from
// production LLM services, shipped in data/ (see data/README.md for provenance and licenses).
// They drive `pagedattn run` and the trace-replay benchmark workloads.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "pagedattn/status.h"

namespace pagedattn::serving {

/// One request of a trace.
struct TraceRecord {
  /// Seconds since the trace's first record (the first record has 0). Non-decreasing from
  /// record to record: the parsers reject a file whose timestamps step back.
  double arrival_s = 0;
  /// Prompt (context) tokens the request brings: its prefill. >= 0 (0 is kept: failed or
  /// empty requests appear in real traces; the replay raises it to 1 and reports that).
  std::int64_t prompt_tokens = 0;
  /// Tokens the service generated for it: its decode. >= 0, and prompt_tokens +
  /// output_tokens <= 2^31 - 1 (the request's KV length has to fit int32 seq_lens).
  std::int64_t output_tokens = 0;
  /// Mooncake `hash_ids`: one id per kMooncakeHashBlockTokens tokens of the prompt (the last
  /// one covers the partial rest); equal ids at the same index with equal ids before them mean
  /// an equal prompt prefix (prefix blocks shared between requests). Empty when the trace has
  /// none (Azure traces, Mooncake lines without the field).
  std::vector<std::int64_t> hash_ids;
};

/// Tokens covered by one Mooncake hash id (the Mooncake release's block size; see
/// data/README.md and ../shared/traces/README.md).
inline constexpr std::int64_t kMooncakeHashBlockTokens = 512;

/// File formats pagedattn reads.
enum class TraceFormat : std::uint8_t {
  /// Azure LLM inference trace 2023: CSV with the header `TIMESTAMP,ContextTokens,GeneratedTokens`
  /// and rows like `2023-11-16 18:15:46.6805900,374,44` (UTC wall time, fraction up to 9 digits).
  kAzureCsv,
  /// Mooncake (Kimi) trace: one JSON object per line with integer `timestamp` (milliseconds),
  /// `input_length`, `output_length` and optional `hash_ids` (TraceRecord::hash_ids).
  kMooncakeJsonl,
};

/// "azure-csv" or "mooncake-jsonl".
const char* to_string(TraceFormat format);

/// A loaded trace.
struct Trace {
  /// The name it was asked for: a short name ("azure-conv") or the path given.
  std::string name;
  /// The file actually read.
  std::string path;
  TraceFormat format = TraceFormat::kAzureCsv;
  /// Records in file order, which is arrival order; at most the `max_records` asked for.
  std::vector<TraceRecord> records;
  /// True when some record has hash_ids (the replay can share prefix blocks).
  bool has_hash_ids = false;
  /// True when loading stopped at `max_records` before the end of the file (so the file's
  /// full record count is unknown).
  bool truncated = false;
};

/// A trace shipped in data/, selectable by short name.
struct KnownTrace {
  const char* name;         // "azure-conv"
  const char* file;         // "azure2023_conv.csv" (relative to a data directory)
  TraceFormat format;
  const char* description;  // one line, for --help
};

/// The shipped traces: azure-conv (the default of `pagedattn run`), azure-code, mooncake.
const std::vector<KnownTrace>& known_traces();

/// Directories searched for the shipped traces, in order: $PAGEDATTN_DATA_DIR (when set and
/// non-empty), `<directory of the executable>/../share/pagedattn` (an installed program), and
/// the source tree's data/ (compile definition PAGEDATTN_DATA_DIR). Entries may not exist.
std::vector<std::string> data_directories();

/// The file behind `name_or_path`: a known short name is looked up in data_directories() (first
/// directory holding the file wins); anything else is taken as a path.
/// Errors: kInvalidArgument when the file does not exist or is not a regular file, naming the
/// directories tried for a short name.
Result<std::string> resolve_trace_path(const std::string& name_or_path);

/// Parse an Azure CSV trace from `in`. `source` names the input in messages ("file.csv").
/// Reads at most `max_records` records (0 = all). Accepts CRLF line ends and blank lines.
/// Timestamps are UTC wall times; arrival_s counts from the first record's.
/// Errors: kInvalidArgument "<source>:<line>: <what>" for a missing/wrong header, a row without
/// exactly 3 fields, an unparsable timestamp or a date that does not exist (2023-02-30), a
/// timestamp earlier than the previous record's, a token count that is not an integer in
/// [0, 2^31), a record whose two counts add up to 2^31 or more, or a file without records.
Result<std::vector<TraceRecord>> parse_azure_csv(std::istream& in, const std::string& source,
                                                 std::int64_t max_records = 0);

/// Parse a Mooncake JSON-lines trace from `in`; conventions and errors as parse_azure_csv
/// (invalid JSON, NaN and Infinity included; a line that is not an object; a missing or
/// non-integer `timestamp` (milliseconds, >= 0, never decreasing), `input_length` or
/// `output_length`; counts outside [0, 2^31) or adding up to 2^31 or more; a `hash_ids` that
/// is not an array of integers in [0, 2^63) or has more than
/// ceil(input_length / kMooncakeHashBlockTokens) entries).
Result<std::vector<TraceRecord>> parse_mooncake_jsonl(std::istream& in, const std::string& source,
                                                      std::int64_t max_records = 0);

/// Load a trace by short name (known_traces()) or path. A path's format comes from its
/// extension (.csv -> Azure CSV; .jsonl/.json -> Mooncake) or, for other extensions, from its
/// first non-blank line: exactly the Azure header -> Azure CSV, a line starting with '{' ->
/// Mooncake. `max_records` as parse_azure_csv.
/// Errors: kInvalidArgument: those of resolve_trace_path and of the parsers (messages carry
/// the file name and line number), and a file of another extension whose first line is
/// neither (the message lists the accepted formats).
Result<Trace> load_trace(const std::string& name_or_path, std::int64_t max_records = 0);

}  // namespace pagedattn::serving
