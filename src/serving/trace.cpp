// Trace loading: strict parsers with line-numbered errors (a malformed trace must never turn
// into a silently different workload), and the data-directory search.
#include "src/serving/trace.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string_view>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#if defined(__linux__)
#include <unistd.h>
#endif

namespace pagedattn::serving {
namespace {

namespace fs = std::filesystem;

// Token counts feed int32 metadata (seq_lens, query_start_loc), so anything at or above 2^31
// is rejected at load time rather than overflowing later.
constexpr std::int64_t kMaxTokenCount = std::numeric_limits<std::int32_t>::max();

constexpr std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

// Listed in the error for a file whose format cannot be told.
constexpr const char* kAcceptedFormats =
    ".csv = Azure LLM inference trace (header 'TIMESTAMP,ContextTokens,GeneratedTokens'), "
    ".jsonl or .json = Mooncake (one JSON object per line with timestamp, input_length, "
    "output_length); with another extension, a file whose first line is that header or a JSON "
    "object";

// Rejected rather than sorted: `--requests N` replays the first N records and loading stops
// there (max_records), which is the N earliest arrivals only in a sorted file; both published
// formats are sorted, so a step back means a damaged or wrongly merged file, and sorting it
// would replay a workload the file's author never recorded. Equal timestamps are fine
// (Mooncake has many: one millisecond resolution).
constexpr const char* kOrderRule =
    "records must be in arrival order (timestamps never decrease)";

Status line_error(const std::string& source, std::int64_t line, const std::string& what) {
  return Status(StatusCode::kInvalidArgument, fmt::format("{}:{}: {}", source, line, what));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

/// Moves `in` past a UTF-8 byte-order mark (spreadsheet exports write one before the first
/// line) and returns where the content starts.
std::streampos skip_byte_order_mark(std::istream& in) {
  char bom[3] = {};
  if (in.read(bom, 3) && std::string_view(bom, 3) == "\xEF\xBB\xBF") return in.tellg();
  in.clear();
  in.seekg(0);
  return in.tellg();
}

/// File content quoted in an error message: at most 80 bytes, bytes outside printable ASCII
/// as \xNN, so that a binary or mis-encoded file cannot put control characters on a terminal.
std::string quoted(std::string_view s) {
  std::string out;
  for (char ch : s.substr(0, 80)) {
    const auto u = static_cast<unsigned char>(ch);
    if (u >= 0x20 && u < 0x7f) out += ch;
    else out += fmt::format("\\x{:02x}", u);
  }
  if (s.size() > 80) out += "...";
  return out;
}

// Strict decimal integer: optional sign, digits, nothing else.
bool parse_int(std::string_view s, std::int64_t* out) {
  s = trim(s);
  if (s.empty()) return false;
  if (s.front() == '+') s.remove_prefix(1);
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

std::int64_t days_in_month(std::int64_t y, unsigned m) {
  static constexpr std::int64_t kDays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// "YYYY-MM-DD HH:MM:SS[.fraction]" (or 'T' between date and time) -> nanoseconds since the
// epoch. Integer arithmetic, so sub-microsecond differences between rows survive (a double of
// seconds since 1970 would keep only ~0.2 us).
bool parse_timestamp(std::string_view s, std::int64_t* ns) {
  s = trim(s);
  auto digits = [&](std::size_t pos, std::size_t n, std::int64_t* v) {
    if (pos + n > s.size()) return false;
    std::int64_t r = 0;
    for (std::size_t i = pos; i < pos + n; ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      r = r * 10 + (s[i] - '0');
    }
    *v = r;
    return true;
  };
  std::int64_t y, mo, d, h, mi, sec;
  if (s.size() < 19 || !digits(0, 4, &y) || s[4] != '-' || !digits(5, 2, &mo) || s[7] != '-' ||
      !digits(8, 2, &d) || (s[10] != ' ' && s[10] != 'T') || !digits(11, 2, &h) ||
      s[13] != ':' || !digits(14, 2, &mi) || s[16] != ':' || !digits(17, 2, &sec)) {
    return false;
  }
  if (mo < 1 || mo > 12 || d < 1 || h > 23 || mi > 59 || sec > 60) return false;
  // days_from_civil would carry 2023-02-30 into March: a date that does not exist is a typo
  // or a corrupted row, not a time.
  if (d > days_in_month(y, static_cast<unsigned>(mo))) return false;
  // Nanoseconds since 1970 in int64 reach from 1677 to 2262; a trace's years are well inside.
  if (y < 1900 || y > 2200) return false;
  std::int64_t frac_ns = 0;
  if (s.size() > 19) {
    if (s[19] != '.' || s.size() == 20) return false;
    std::int64_t scale = 100000000;
    for (std::size_t i = 20; i < s.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(s[i]))) return false;
      frac_ns += (s[i] - '0') * scale;  // digits past the 9th are below a nanosecond: dropped
      scale /= 10;
    }
  }
  const std::int64_t days =
      days_from_civil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d));
  *ns = ((days * 24 + h) * 60 + mi) * 60 + sec;
  *ns = *ns * 1000000000 + frac_ns;
  return true;
}

Status check_count(const std::string& source, std::int64_t line, const char* field,
                   std::int64_t value) {
  if (value < 0 || value > kMaxTokenCount) {
    return line_error(source, line,
                      fmt::format("{} = {}: expected an integer in [0, {}]", field, value,
                                  kMaxTokenCount));
  }
  return Status::Ok();
}

// Both counts fit int32 on their own, but a request's KV length is their sum (prompt plus
// generated tokens), and it lands in int32 seq_lens: 2^31 - 1 + 5 would wrap negative there.
Status check_request_length(const std::string& source, std::int64_t line, const char* prompt_field,
                            const char* output_field, const TraceRecord& rec) {
  if (rec.prompt_tokens + rec.output_tokens > kMaxTokenCount) {
    return line_error(source, line,
                      fmt::format("{} + {} = {}: a request's length must be at most {} (its KV "
                                  "cache is indexed with int32)",
                                  prompt_field, output_field,
                                  rec.prompt_tokens + rec.output_tokens, kMaxTokenCount));
  }
  return Status::Ok();
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

std::string executable_directory() {
#if defined(__linux__)
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) return exe.parent_path().string();
#endif
  return {};
}

}  // namespace

const char* to_string(TraceFormat format) {
  switch (format) {
    case TraceFormat::kAzureCsv: return "azure-csv";
    case TraceFormat::kMooncakeJsonl: return "mooncake-jsonl";
  }
  return "unknown";
}

const std::vector<KnownTrace>& known_traces() {
  static const std::vector<KnownTrace> traces = {
      {"azure-conv", "azure2023_conv.csv", TraceFormat::kAzureCsv,
       "Azure LLM inference trace 2023, conversation service (19366 requests, 1 hour)"},
      {"azure-code", "azure2023_code.csv", TraceFormat::kAzureCsv,
       "Azure LLM inference trace 2023, code completion (8819 requests, long prompts)"},
      {"mooncake", "mooncake_conversation.jsonl", TraceFormat::kMooncakeJsonl,
       "Mooncake/Kimi conversation trace (12031 requests, long contexts)"},
  };
  return traces;
}

std::vector<std::string> data_directories() {
  std::vector<std::string> dirs;
  if (const char* env = std::getenv("PAGEDATTN_DATA_DIR"); env != nullptr && *env != '\0') {
    dirs.emplace_back(env);
  }
  if (const std::string exe_dir = executable_directory(); !exe_dir.empty()) {
    dirs.push_back((fs::path(exe_dir) / ".." / "share" / "pagedattn").lexically_normal().string());
  }
#ifdef PAGEDATTN_DATA_DIR
  dirs.emplace_back(PAGEDATTN_DATA_DIR);
#endif
  return dirs;
}

Result<std::string> resolve_trace_path(const std::string& name_or_path) {
  for (const KnownTrace& known : known_traces()) {
    if (name_or_path != known.name) continue;
    std::string tried;
    for (const std::string& dir : data_directories()) {
      const std::string candidate = (fs::path(dir) / known.file).string();
      if (is_regular_file(candidate)) return candidate;
      tried += fmt::format("{}{}", tried.empty() ? "" : ", ", candidate);
    }
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("trace '{}': {} not found (tried {}); set PAGEDATTN_DATA_DIR to the "
                              "directory holding the shipped traces",
                              known.name, known.file, tried.empty() ? "no directories" : tried));
  }
  if (name_or_path.empty()) {
    return Status(StatusCode::kInvalidArgument, "trace: empty name or path");
  }
  if (!is_regular_file(name_or_path)) {
    std::string names;
    for (const KnownTrace& known : known_traces()) {
      names += fmt::format("{}{}", names.empty() ? "" : ", ", known.name);
    }
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("trace '{}': {} (and not one of the shipped traces: {})",
                              name_or_path,
                              std::filesystem::exists(name_or_path) ? "not a regular file"
                                                                    : "no such file",
                              names));
  }
  return name_or_path;
}

Result<std::vector<TraceRecord>> parse_azure_csv(std::istream& in, const std::string& source,
                                                 std::int64_t max_records) {
  std::vector<TraceRecord> records;
  std::string raw;
  std::int64_t line_no = 0;
  bool have_header = false;
  std::int64_t first_ns = 0;
  std::int64_t prev_ns = 0;  // the previous record's timestamp, its line and its text
  std::int64_t prev_line = 0;
  std::string prev_text;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string_view line = trim(raw);  // also drops the '\r' of CRLF files
    if (line.empty()) continue;
    if (!have_header) {
      // The header is required: it is the only guard against feeding a different CSV (columns
      // in another order would silently swap prompt and output lengths).
      if (line != kAzureHeader) {
        return line_error(source, line_no,
                          fmt::format("expected the header 'TIMESTAMP,ContextTokens,"
                                      "GeneratedTokens', found '{}'",
                                      quoted(line)));
      }
      have_header = true;
      continue;
    }
    std::string_view fields[3];
    std::size_t count = 0;
    std::string_view rest = line;
    while (true) {
      const std::size_t comma = rest.find(',');
      if (count < 3) fields[count] = rest.substr(0, comma);
      ++count;
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
    if (count != 3) {
      return line_error(source, line_no,
                        fmt::format("expected 3 comma-separated fields (TIMESTAMP,ContextTokens,"
                                    "GeneratedTokens), found {}",
                                    count));
    }
    std::int64_t ns = 0;
    if (!parse_timestamp(fields[0], &ns)) {
      return line_error(source, line_no,
                        fmt::format("TIMESTAMP '{}': expected a valid date and time "
                                    "'YYYY-MM-DD HH:MM:SS[.fraction]'",
                                    quoted(trim(fields[0]))));
    }
    TraceRecord rec;
    if (!parse_int(fields[1], &rec.prompt_tokens)) {
      return line_error(source, line_no,
                        fmt::format("ContextTokens '{}': expected an integer",
                                    quoted(trim(fields[1]))));
    }
    if (!parse_int(fields[2], &rec.output_tokens)) {
      return line_error(source, line_no,
                        fmt::format("GeneratedTokens '{}': expected an integer",
                                    quoted(trim(fields[2]))));
    }
    PAGEDATTN_RETURN_IF_ERROR(check_count(source, line_no, "ContextTokens", rec.prompt_tokens));
    PAGEDATTN_RETURN_IF_ERROR(check_count(source, line_no, "GeneratedTokens", rec.output_tokens));
    PAGEDATTN_RETURN_IF_ERROR(
        check_request_length(source, line_no, "ContextTokens", "GeneratedTokens", rec));
    if (records.empty()) {
      first_ns = ns;
    } else if (ns < prev_ns) {
      return line_error(source, line_no,
                        fmt::format("TIMESTAMP '{}' is earlier than line {}'s '{}': {}",
                                    quoted(trim(fields[0])), prev_line,
                                    quoted(std::string_view(prev_text)), kOrderRule));
    }
    prev_ns = ns;
    prev_line = line_no;
    prev_text.assign(trim(fields[0]));
    rec.arrival_s = static_cast<double>(ns - first_ns) * 1e-9;
    records.push_back(rec);
    // Stop right after the last wanted record, so that the caller can still tell whether more
    // follow.
    if (max_records > 0 && static_cast<std::int64_t>(records.size()) == max_records) break;
  }
  if (in.bad()) return line_error(source, line_no + 1, "read error");
  if (!have_header) return line_error(source, line_no, "empty file: expected a CSV header");
  if (records.empty()) return line_error(source, line_no, "no records after the header");
  return records;
}

Result<std::vector<TraceRecord>> parse_mooncake_jsonl(std::istream& in, const std::string& source,
                                                      std::int64_t max_records) {
  std::vector<TraceRecord> records;
  std::string raw;
  std::int64_t line_no = 0;
  std::int64_t first_ms = 0;
  std::int64_t prev_ms = 0;  // the previous record's timestamp and its line
  std::int64_t prev_line = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    // No exceptions: a parse failure comes back as a "discarded" value.
    const nlohmann::json obj = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) {
      return line_error(source, line_no,
                        fmt::format("invalid JSON: '{}'", quoted(line)));
    }
    if (!obj.is_object()) return line_error(source, line_no, "expected a JSON object");
    std::int64_t values[3] = {};
    const char* names[3] = {"timestamp", "input_length", "output_length"};
    for (int i = 0; i < 3; ++i) {
      const auto it = obj.find(names[i]);
      if (it == obj.end()) {
        return line_error(source, line_no, fmt::format("missing field \"{}\"", names[i]));
      }
      if (!it->is_number_integer()) {
        return line_error(source, line_no,
                          fmt::format("field \"{}\" = {}: expected an integer", names[i],
                                      it->dump()));
      }
      // Above int64 the conversion would wrap (2^64 - 1 would read as -1).
      if (it->is_number_unsigned() &&
          it->get<std::uint64_t>() >
              static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return line_error(source, line_no,
                          fmt::format("field \"{}\" = {}: out of range", names[i], it->dump()));
      }
      values[i] = it->get<std::int64_t>();
    }
    if (values[0] < 0) {
      return line_error(source, line_no,
                        fmt::format("timestamp = {}: expected milliseconds >= 0", values[0]));
    }
    TraceRecord rec;
    rec.prompt_tokens = values[1];
    rec.output_tokens = values[2];
    PAGEDATTN_RETURN_IF_ERROR(check_count(source, line_no, "input_length", rec.prompt_tokens));
    PAGEDATTN_RETURN_IF_ERROR(check_count(source, line_no, "output_length", rec.output_tokens));
    PAGEDATTN_RETURN_IF_ERROR(
        check_request_length(source, line_no, "input_length", "output_length", rec));
    if (records.empty()) {
      first_ms = values[0];
    } else if (values[0] < prev_ms) {
      return line_error(source, line_no,
                        fmt::format("timestamp = {} ms is earlier than line {}'s {} ms: {}",
                                    values[0], prev_line, prev_ms, kOrderRule));
    }
    if (const auto it = obj.find("hash_ids"); it != obj.end()) {
      if (!it->is_array()) {
        return line_error(source, line_no,
                          fmt::format("field \"hash_ids\" = {}: expected an array of integers",
                                      quoted(std::string_view(it->dump()))));
      }
      // Ids past the prompt's last block name blocks that hold no token: ignored (kept out of
      // the record), as the replay could not use them.
      const auto max_ids = static_cast<std::size_t>(
          (rec.prompt_tokens + kMooncakeHashBlockTokens - 1) / kMooncakeHashBlockTokens);
      rec.hash_ids.reserve(std::min(it->size(), max_ids));
      for (std::size_t k = 0; k < it->size(); ++k) {
        const nlohmann::json& id = (*it)[k];
        if (!id.is_number_integer() || (id.is_number_unsigned() &&
                                        id.get<std::uint64_t>() > static_cast<std::uint64_t>(
                                            std::numeric_limits<std::int64_t>::max())) ||
            id.get<std::int64_t>() < 0) {
          return line_error(source, line_no,
                            fmt::format("hash_ids[{}] = {}: expected an integer in [0, 2^63)", k,
                                        quoted(std::string_view(id.dump()))));
        }
        if (k < max_ids) rec.hash_ids.push_back(id.get<std::int64_t>());
      }
    }
    prev_ms = values[0];
    prev_line = line_no;
    rec.arrival_s = static_cast<double>(values[0] - first_ms) * 1e-3;
    records.push_back(rec);
    if (max_records > 0 && static_cast<std::int64_t>(records.size()) == max_records) break;
  }
  if (in.bad()) return line_error(source, line_no + 1, "read error");
  if (records.empty()) return line_error(source, line_no, "no records");
  return records;
}

Result<Trace> load_trace(const std::string& name_or_path, std::int64_t max_records) {
  Result<std::string> path = resolve_trace_path(name_or_path);
  if (!path.ok()) return path.status();
  Trace trace;
  trace.name = name_or_path;
  trace.path = *path;

  bool known = false;
  for (const KnownTrace& k : known_traces()) {
    if (name_or_path == k.name) {
      trace.format = k.format;
      known = true;
    }
  }
  std::ifstream in(trace.path, std::ios::binary);
  if (!in) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("trace '{}': cannot open {}", name_or_path, trace.path));
  }
  const std::streampos content = skip_byte_order_mark(in);
  if (!known) {
    std::string ext = fs::path(trace.path).extension().string();
    std::transform(ext.begin(), ext.end(), ext.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    if (ext == ".csv") {
      trace.format = TraceFormat::kAzureCsv;
    } else if (ext == ".jsonl" || ext == ".json") {
      trace.format = TraceFormat::kMooncakeJsonl;
    } else {
      // Another extension (.txt, .log, none): the content must name its format, so that a
      // file in neither format is not read as a CSV and reported as a bad header.
      std::string first;
      std::string raw;
      while (first.empty() && std::getline(in, raw)) first = std::string(trim(raw));
      if (first == kAzureHeader) {
        trace.format = TraceFormat::kAzureCsv;
      } else if (!first.empty() && first.front() == '{') {
        trace.format = TraceFormat::kMooncakeJsonl;
      } else {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("trace '{}': cannot tell its format from {} or from its {}; "
                                  "accepted: {}",
                                  name_or_path,
                                  ext.empty() ? std::string("a name without an extension")
                                              : fmt::format("the extension '{}'", ext),
                                  first.empty()
                                      ? std::string("content (no non-blank line)")
                                      : fmt::format("first line '{}'",
                                                    quoted(std::string_view(first))),
                                  kAcceptedFormats));
      }
      in.clear();
      in.seekg(content);
    }
  }
  const std::string source = fs::path(trace.path).filename().string();
  Result<std::vector<TraceRecord>> records =
      trace.format == TraceFormat::kAzureCsv ? parse_azure_csv(in, source, max_records)
                                             : parse_mooncake_jsonl(in, source, max_records);
  if (!records.ok()) return records.status();
  trace.records = std::move(records).value();
  trace.has_hash_ids = std::any_of(trace.records.begin(), trace.records.end(),
                                   [](const TraceRecord& r) { return !r.hash_ids.empty(); });
  // Stopping at max_records leaves the rest unread; say so, so that nobody reports the
  // truncated count as the file's size.
  if (max_records > 0 && static_cast<std::int64_t>(trace.records.size()) == max_records) {
    std::string probe;
    while (std::getline(in, probe)) {
      if (!trim(probe).empty()) {
        trace.truncated = true;
        break;
      }
    }
  }
  return trace;
}

}  // namespace pagedattn::serving
