// Trace replay (src/serving): trace loading and its errors, the block allocator, the
// token-budget scheduler, and small end-to-end replays through the CPU backend, verified
// against the oracle for every model preset and layout.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/serving/replay.h"
#include "src/serving/trace.h"

namespace pagedattn::serving {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string write_temp(const std::string& name, const std::string& content) {
  const std::string path = ::testing::TempDir() + "/pagedattn_serving_" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// ------------------------------------------------------------------------------ traces

TEST(Trace, ShippedTracesLoadWithTheirDocumentedRecordCounts) {
  // data/README.md: records = data rows (the CSV header is not one).
  struct Expect {
    const char* name;
    std::size_t records;
    TraceFormat format;
    std::int64_t first_prompt, first_output;
  };
  for (const Expect& e : {Expect{"azure-conv", 19366, TraceFormat::kAzureCsv, 374, 44},
                          Expect{"azure-code", 8819, TraceFormat::kAzureCsv, 4808, 10},
                          Expect{"mooncake", 12031, TraceFormat::kMooncakeJsonl, 6758, 500}}) {
    SCOPED_TRACE(e.name);
    Result<Trace> trace = load_trace(e.name);
    ASSERT_TRUE(trace.ok()) << trace.status().to_string();
    EXPECT_EQ(trace->records.size(), e.records);
    EXPECT_EQ(trace->format, e.format);
    EXPECT_FALSE(trace->truncated);
    EXPECT_EQ(trace->records[0].prompt_tokens, e.first_prompt);
    EXPECT_EQ(trace->records[0].output_tokens, e.first_output);
    EXPECT_EQ(trace->records[0].arrival_s, 0.0);
    double previous_s = 0.0;
    for (const TraceRecord& r : trace->records) {
      ASSERT_GE(r.arrival_s, previous_s);  // the loader's documented order
      previous_s = r.arrival_s;
      ASSERT_GE(r.prompt_tokens, 0);
      ASSERT_GE(r.output_tokens, 0);
    }
  }
}

TEST(Trace, AzureTimestampsAreRelativeSeconds) {
  Result<Trace> trace = load_trace("azure-conv", 2);
  ASSERT_TRUE(trace.ok()) << trace.status().to_string();
  ASSERT_EQ(trace->records.size(), 2u);
  EXPECT_TRUE(trace->truncated);
  // 18:15:50.9951690 - 18:15:46.6805900
  EXPECT_NEAR(trace->records[1].arrival_s, 4.314579, 1e-9);
  EXPECT_EQ(trace->records[1].prompt_tokens, 396);
  EXPECT_EQ(trace->records[1].output_tokens, 109);
}

TEST(Trace, DataDirectoryFromEnvironmentComesFirst) {
  const std::string dir = ::testing::TempDir();
  setenv("PAGEDATTN_DATA_DIR", dir.c_str(), 1);
  const std::vector<std::string> dirs = data_directories();
  unsetenv("PAGEDATTN_DATA_DIR");
  ASSERT_FALSE(dirs.empty());
  EXPECT_EQ(dirs.front(), dir);
}

TEST(Trace, PathsAndFormatDetection) {
  const std::string csv = write_temp(
      "ok.csv",
      "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2024-01-01 00:00:00.5,10,2\r\n\r\n"
      "2024-01-01 00:00:01,20,3");
  Result<Trace> a = load_trace(csv);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->format, TraceFormat::kAzureCsv);
  ASSERT_EQ(a->records.size(), 2u);
  EXPECT_DOUBLE_EQ(a->records[1].arrival_s, 0.5);
  EXPECT_EQ(a->records[1].prompt_tokens, 20);

  const std::string jsonl = write_temp(
      "ok.jsonl", "{\"timestamp\": 1000, \"input_length\": 7, \"output_length\": 1}\n"
                  "{\"timestamp\": 3500, \"input_length\": 8, \"output_length\": 2, "
                  "\"hash_ids\": [0, 1]}\n");
  Result<Trace> b = load_trace(jsonl);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->format, TraceFormat::kMooncakeJsonl);
  ASSERT_EQ(b->records.size(), 2u);
  EXPECT_DOUBLE_EQ(b->records[1].arrival_s, 2.5);

  // Unknown extension: sniffed from the first character.
  const std::string sniffed = write_temp(
      "sniffed.txt", "\n  {\"timestamp\": 0, \"input_length\": 5, \"output_length\": 5}\n");
  Result<Trace> c = load_trace(sniffed);
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->format, TraceFormat::kMooncakeJsonl);

  // A UTF-8 byte-order mark (spreadsheet exports) before the header or the first object, with
  // a known extension and a sniffed one.
  const char* csv_body =
      "\xEF\xBB\xBFTIMESTAMP,ContextTokens,GeneratedTokens\n2024-01-01 00:00:00,10,3\n";
  const char* json_body =
      "\xEF\xBB\xBF{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 3}\n";
  const std::pair<const char*, TraceFormat> boms[] = {
      {"bom.csv", TraceFormat::kAzureCsv}, {"bom_csv.txt", TraceFormat::kAzureCsv},
      {"bom.jsonl", TraceFormat::kMooncakeJsonl}, {"bom_json.txt", TraceFormat::kMooncakeJsonl}};
  for (const auto& [name, format] : boms) {
    SCOPED_TRACE(name);
    Result<Trace> d = load_trace(
        write_temp(name, format == TraceFormat::kAzureCsv ? csv_body : json_body));
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    EXPECT_EQ(d->format, format);
    ASSERT_EQ(d->records.size(), 1u);
    EXPECT_EQ(d->records[0].prompt_tokens, 10);
    EXPECT_EQ(d->records[0].output_tokens, 3);
  }
  // Only at the start of the file: a mark on a later line is content, and an error.
  Result<Trace> f = load_trace(write_temp(
      "bom2.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n\xEF\xBB\xBF"
      "2024-01-01 00:00:00,1,1\n"));
  EXPECT_FALSE(f.ok());
}

struct BadTrace {
  const char* label;
  const char* file;     // name (extension picks the parser)
  const char* content;
  const char* message;  // fragment of the expected message
};

class MalformedTrace : public ::testing::TestWithParam<BadTrace> {};

TEST_P(MalformedTrace, GivesALineNumberedError) {
  const BadTrace& bad = GetParam();
  Result<Trace> trace = load_trace(write_temp(bad.file, bad.content));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(trace.status().message(), bad.message)) << trace.status().message();
}

constexpr const char* kHeader = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
const std::string kGoodRow = "2023-11-16 18:15:46.6805900,374,44\n";

INSTANTIATE_TEST_SUITE_P(
    Trace, MalformedTrace,
    ::testing::Values(
        BadTrace{"empty", "empty.csv", "", "empty.csv:0: empty file"},
        BadTrace{"header", "hdr.csv", "time,a,b\n1,2,3\n", "hdr.csv:1: expected the header"},
        // Bytes outside printable ASCII are quoted as \xNN (a binary file's first line).
        BadTrace{"binary", "bin.csv", "\x01\x1b[2Jab\xff\n",
                 "found '\\x01\\x1b[2Jab\\xff'"},
        BadTrace{"no_records", "norec.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n",
                 "no records"},
        BadTrace{"fields", "fields.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47,374\n",
                 "fields.csv:3: expected 3 comma-separated fields"},
        BadTrace{"extra_field", "extra.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,2,3\n",
                 "extra.csv:2: expected 3 comma-separated fields (TIMESTAMP,ContextTokens,"
                 "GeneratedTokens), found 4"},
        BadTrace{"timestamp", "ts.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023/11/16 18:15:47,1,2\n",
                 "ts.csv:2: TIMESTAMP '2023/11/16 18:15:47'"},
        // Years whose nanoseconds since 1970 would overflow int64 (past 2262).
        BadTrace{"far_year", "year.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n9999-01-01 00:00:00,1,2\n",
                 "year.csv:2: TIMESTAMP '9999-01-01 00:00:00'"},
        BadTrace{"integer", "int.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,12x,2\n",
                 "int.csv:2: ContextTokens '12x': expected an integer"},
        BadTrace{"negative", "neg.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,5,-2\n",
                 "neg.csv:2: GeneratedTokens = -2"},
        BadTrace{"too_large", "big.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,4294967296,2\n",
                 "big.csv:2: ContextTokens = 4294967296"},
        BadTrace{"json", "bad.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n{oops\n",
                 "bad.jsonl:2: invalid JSON"},
        BadTrace{"json_not_object", "arr.jsonl", "[1, 2]\n", "arr.jsonl:1: expected a JSON object"},
        BadTrace{"json_missing", "miss.jsonl",
                 "\n{\"timestamp\": 0, \"input_length\": 1}\n",
                 "miss.jsonl:2: missing field \"output_length\""},
        BadTrace{"json_type", "type.jsonl",
                 "{\"timestamp\": 0, \"input_length\": \"12\", \"output_length\": 1}\n",
                 "type.jsonl:1: field \"input_length\" = \"12\": expected an integer"},
        BadTrace{"json_negative", "negj.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 3, \"output_length\": -1}\n",
                 "negj.jsonl:1: output_length = -1"},
        // 2^64 - 1 must not wrap to -1 on its way to int64.
        BadTrace{"json_u64", "u64.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 18446744073709551615, "
                 "\"output_length\": 1}\n",
                 "u64.jsonl:1: field \"input_length\" = 18446744073709551615: out of range"},
        BadTrace{"json_empty", "none.jsonl", "\n\n", "none.jsonl:2: no records"},
        // Arrival order: a step back is an error naming both lines (CRLF must not hide it).
        BadTrace{"backwards", "back.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.5,1,2\r\n"
                 "2023-11-16 18:15:46.5,1,2\r\n2023-11-16 18:15:46.4999999,1,2\r\n",
                 "back.csv:4: TIMESTAMP '2023-11-16 18:15:46.4999999' is earlier than line 3's "
                 "'2023-11-16 18:15:46.5': records must be in arrival order"},
        BadTrace{"backwards_day", "day.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-17 00:00:00,1,2\n"
                 "2023-11-16 23:59:59,1,2\n",
                 "day.csv:3: TIMESTAMP '2023-11-16 23:59:59' is earlier than line 2's"},
        BadTrace{"json_backwards", "backj.jsonl",
                 "{\"timestamp\": 7, \"input_length\": 1, \"output_length\": 1}\n\n"
                 "{\"timestamp\": 6, \"input_length\": 1, \"output_length\": 1}\n",
                 "backj.jsonl:3: timestamp = 6 ms is earlier than line 1's 7 ms: records must be "
                 "in arrival order"},
        // Dates that do not exist (days_from_civil would move them into the next month).
        BadTrace{"feb_29_not_leap", "feb.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-02-29 00:00:00,1,2\n",
                 "feb.csv:2: TIMESTAMP '2023-02-29 00:00:00': expected a valid date"},
        BadTrace{"apr_31", "apr.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-04-31 00:00:00,1,2\n",
                 "apr.csv:2: TIMESTAMP '2023-04-31 00:00:00'"},
        BadTrace{"hour_24", "hour.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-04-30 24:00:00,1,2\n",
                 "hour.csv:2: TIMESTAMP '2023-04-30 24:00:00'"},
        // Each count fits int32 but the request (prompt + output) does not.
        BadTrace{"sum_overflow", "sum.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,2147483647,1\n",
                 "sum.csv:2: ContextTokens + GeneratedTokens = 2147483648: a request's length "
                 "must be at most 2147483647"},
        BadTrace{"json_sum_overflow", "sum.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1073741824, "
                 "\"output_length\": 1073741824}\n",
                 "sum.jsonl:1: input_length + output_length = 2147483648"},
        BadTrace{"json_negative_timestamp", "negts.jsonl",
                 "{\"timestamp\": -1, \"input_length\": 1, \"output_length\": 1}\n",
                 "negts.jsonl:1: timestamp = -1: expected milliseconds >= 0"},
        // NaN, Infinity and a literal past double's range are not JSON numbers nlohmann accepts.
        BadTrace{"json_nan", "nan.jsonl",
                 "{\"timestamp\": NaN, \"input_length\": 1, \"output_length\": 1}\n",
                 "nan.jsonl:1: invalid JSON"},
        BadTrace{"json_infinity", "inf.jsonl",
                 "{\"timestamp\": 0, \"input_length\": Infinity, \"output_length\": 1}\n",
                 "inf.jsonl:1: invalid JSON"},
        BadTrace{"json_huge_float", "huge.jsonl",
                 "{\"timestamp\": 1e400, \"input_length\": 1, \"output_length\": 1}\n",
                 "huge.jsonl:1: invalid JSON"},
        BadTrace{"json_fractional_timestamp", "frac.jsonl",
                 "{\"timestamp\": 1.5, \"input_length\": 1, \"output_length\": 1}\n",
                 "frac.jsonl:1: field \"timestamp\" = 1.5: expected an integer"},
        BadTrace{"empty_count", "emptyc.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,,1\n",
                 "emptyc.csv:2: ContextTokens '': expected an integer"},
        // Trailing garbage: after the last row, after a field, after a JSON object, and a
        // last line cut short (an interrupted download).
        BadTrace{"trailing_line", "tail.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,2\n"
                 "-- end of export --\n",
                 "tail.csv:3: expected 3 comma-separated fields"},
        BadTrace{"trailing_field_text", "tailf.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,2 tokens\n",
                 "tailf.csv:2: GeneratedTokens '2 tokens': expected an integer"},
        BadTrace{"json_trailing", "tail.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1} x\n",
                 "tail.jsonl:1: invalid JSON"},
        BadTrace{"json_cut_short", "cut.jsonl",
                 "{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}\n"
                 "{\"timestamp\": 1, \"input_le",
                 "cut.jsonl:2: invalid JSON"},
        BadTrace{"header_only_crlf", "hdr_crlf.csv",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\r\n\r\n", "hdr_crlf.csv:2: no records"},
        BadTrace{"blank_csv", "blank.csv", " \r\n\t\n", "blank.csv:2: empty file"},
        // Another extension: the first line must be the Azure header or a JSON object, and the
        // error lists what is accepted (it used to be read as a CSV with a wrong header).
        BadTrace{"unknown_extension", "notes.txt", "hello\n1,2,3\n",
                 "cannot tell its format from the extension '.txt' or from its first line "
                 "'hello'; accepted: .csv = Azure LLM inference trace"},
        BadTrace{"unknown_extension_mooncake_listed", "notes2.log", "a,b,c\n",
                 ".jsonl or .json = Mooncake"},
        BadTrace{"no_extension", "trace_without_extension", "1,2,3\n",
                 "from a name without an extension or from its first line '1,2,3'"},
        BadTrace{"unknown_extension_empty", "empty.txt", "\n \n",
                 "from its content (no non-blank line)"},
        // Sniffed as Azure, then held to the same rules as a .csv.
        BadTrace{"sniffed_backwards", "sniffed_back.txt",
                 "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:47,1,2\n"
                 "2023-11-16 18:15:46,1,2\n",
                 "sniffed_back.txt:3: TIMESTAMP '2023-11-16 18:15:46' is earlier"}),
    [](const ::testing::TestParamInfo<BadTrace>& param) { return std::string(param.param.label); });

TEST(Trace, TrailingNulBytesAreAnError) {
  // A file padded with NUL bytes (a preallocated or crashed writer): the padding is not blank.
  const std::string content =
      std::string(kHeader) + kGoodRow + std::string("\0\0\0", 3);
  Result<Trace> trace = load_trace(write_temp("nul.csv", content));
  ASSERT_FALSE(trace.ok());
  EXPECT_EQ(trace.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(trace.status().message(), "nul.csv:3: expected 3 comma-separated fields"))
      << trace.status().message();
}

TEST(Trace, AcceptsWhatRealTracesContain) {
  // Equal timestamps (Mooncake's millisecond resolution gives many), a leap day, a request of
  // exactly 2^31 - 1 tokens, and zero counts (failed requests; the replay raises them to 1
  // and reports it) all load.
  Result<Trace> csv = load_trace(write_temp(
      "real.csv", std::string(kHeader) + "2024-02-29 23:59:59.5,0,0\r\n"
                                         "2024-02-29 23:59:59.5,2147483646,1\r\n"
                                         "2024-03-01 00:00:00,3,4\r\n"));
  ASSERT_TRUE(csv.ok()) << csv.status().to_string();
  ASSERT_EQ(csv->records.size(), 3u);
  EXPECT_EQ(csv->records[0].prompt_tokens, 0);
  EXPECT_EQ(csv->records[0].output_tokens, 0);
  EXPECT_EQ(csv->records[1].arrival_s, 0.0);
  EXPECT_EQ(csv->records[1].prompt_tokens, 2147483646);
  EXPECT_DOUBLE_EQ(csv->records[2].arrival_s, 0.5);

  Result<Trace> jsonl = load_trace(write_temp(
      "real.jsonl", "{\"timestamp\": 10, \"input_length\": 1, \"output_length\": 1}\n"
                    "{\"timestamp\": 10, \"input_length\": 2, \"output_length\": 0}\n"
                    "{\"timestamp\": 11, \"input_length\": 3, \"output_length\": 1}\n"));
  ASSERT_TRUE(jsonl.ok()) << jsonl.status().to_string();
  ASSERT_EQ(jsonl->records.size(), 3u);
  EXPECT_EQ(jsonl->records[1].arrival_s, 0.0);
  EXPECT_EQ(jsonl->records[1].prompt_tokens, 2);  // file order kept for equal timestamps
  EXPECT_DOUBLE_EQ(jsonl->records[2].arrival_s, 0.001);
}

TEST(Trace, OtherExtensionsAreSniffedOnlyFromAnUnambiguousFirstLine) {
  // The Azure header (after blank lines, with CRLF) makes a .txt or extensionless file a CSV.
  for (const char* name : {"azure_export.txt", "azure_export"}) {
    SCOPED_TRACE(name);
    Result<Trace> t = load_trace(
        write_temp(name, std::string("\r\n") + "TIMESTAMP,ContextTokens,GeneratedTokens\r\n" +
                             "2023-11-16 18:15:47,5,6\r\n"));
    ASSERT_TRUE(t.ok()) << t.status().to_string();
    EXPECT_EQ(t->format, TraceFormat::kAzureCsv);
    ASSERT_EQ(t->records.size(), 1u);
    EXPECT_EQ(t->records[0].prompt_tokens, 5);
  }
  // A header that differs only in case is not the header: an error, not a guess.
  Result<Trace> lower = load_trace(write_temp(
      "lower.txt", "timestamp,contexttokens,generatedtokens\n2023-11-16 18:15:47,5,6\n"));
  ASSERT_FALSE(lower.ok());
  EXPECT_TRUE(contains(lower.status().message(), "cannot tell its format"))
      << lower.status().message();
}

TEST(Trace, MissingFilesAndNames) {
  Result<Trace> missing = load_trace("/nonexistent/dir/trace.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(contains(missing.status().message(), "no such file")) << missing.status().message();
  EXPECT_TRUE(contains(missing.status().message(), "azure-conv")) << missing.status().message();

  Result<Trace> empty = load_trace("");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kInvalidArgument);
}

TEST(Trace, ParsersStopAtMaxRecords) {
  std::istringstream in(std::string(kHeader) + kGoodRow + kGoodRow + "garbage line\n");
  Result<std::vector<TraceRecord>> two = parse_azure_csv(in, "mem.csv", 2);
  ASSERT_TRUE(two.ok()) << two.status().to_string();  // the bad line is never reached
  EXPECT_EQ(two->size(), 2u);
}

// ------------------------------------------------------------------------------ allocator

TEST(BlockAllocator, RejectsBadPoolSizes) {
  EXPECT_FALSE(BlockAllocator::create(0, 1).ok());
  EXPECT_FALSE(BlockAllocator::create(-5, 1).ok());
  EXPECT_FALSE(BlockAllocator::create(std::int64_t{1} << 31, 1).ok());
}

TEST(BlockAllocator, NeverHandsOutABlockTwiceAndRunsOutCleanly) {
  Result<BlockAllocator> created = BlockAllocator::create(64, 7);
  ASSERT_TRUE(created.ok());
  BlockAllocator a = std::move(created).value();
  std::set<std::int32_t> held;
  std::vector<std::int32_t> order;
  for (int i = 0; i < 64; ++i) {
    Result<std::int32_t> b = a.allocate();
    ASSERT_TRUE(b.ok());
    ASSERT_TRUE(held.insert(*b).second) << "block " << *b << " handed out twice";
    ASSERT_TRUE(a.is_allocated(*b));
    order.push_back(*b);
  }
  EXPECT_EQ(*held.begin(), 0);
  EXPECT_EQ(*held.rbegin(), 63);
  // The initial free list is a permutation, not 0, 1, 2, ...: block tables are scattered.
  EXPECT_FALSE(std::is_sorted(order.begin(), order.end()));
  Result<std::int32_t> none = a.allocate();
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(contains(none.status().message(), "out of KV-cache blocks: all 64 in use"));
  EXPECT_EQ(a.num_free(), 0);
  EXPECT_EQ(a.peak_used(), 64);

  // Errors leave the state alone.
  EXPECT_FALSE(a.free(64).ok());
  EXPECT_FALSE(a.free(-1).ok());
  ASSERT_TRUE(a.free(order[10]).ok());
  Status twice = a.free(order[10]);
  EXPECT_FALSE(twice.ok());
  EXPECT_TRUE(contains(twice.message(), "not allocated")) << twice.message();
  EXPECT_EQ(a.num_used(), 63);

  for (std::int32_t b : order) {
    if (b != order[10]) {
      ASSERT_TRUE(a.free(b).ok());
    }
  }
  EXPECT_EQ(a.num_used(), 0);
  EXPECT_EQ(a.num_free(), 64);
  EXPECT_EQ(a.peak_used(), 64);
}

TEST(BlockAllocator, FreeListIsFifo) {
  BlockAllocator a = BlockAllocator::create(4, 3).value();
  const std::int32_t b0 = a.allocate().value();
  const std::int32_t b1 = a.allocate().value();
  ASSERT_TRUE(a.free(b0).ok());
  // Two never-used blocks come before the freed one.
  const std::int32_t b2 = a.allocate().value();
  const std::int32_t b3 = a.allocate().value();
  EXPECT_NE(b2, b0);
  EXPECT_NE(b3, b0);
  EXPECT_EQ(a.allocate().value(), b0);
  EXPECT_EQ(std::set<std::int32_t>({b0, b1, b2, b3}).size(), 4u);
}

TEST(BlockAllocator, SameSeedSameOrder) {
  BlockAllocator a = BlockAllocator::create(100, 42).value();
  BlockAllocator b = BlockAllocator::create(100, 42).value();
  BlockAllocator c = BlockAllocator::create(100, 43).value();
  bool differs = false;
  for (int i = 0; i < 100; ++i) {
    const std::int32_t x = a.allocate().value();
    EXPECT_EQ(x, b.allocate().value());
    differs |= x != c.allocate().value();
  }
  EXPECT_TRUE(differs);
}

// ------------------------------------------------------------------------------ scheduler

// Drive a scheduler to the end without attention, checking every invariant at every step.
void run_scheduler(const SchedulerConfig& config, const std::vector<RequestSpec>& specs,
                   std::int64_t num_blocks) {
  BlockAllocator allocator = BlockAllocator::create(num_blocks, 5).value();
  Result<Scheduler> created = Scheduler::create(config, specs, &allocator);
  ASSERT_TRUE(created.ok()) << created.status().to_string();
  Scheduler s = std::move(created).value();
  std::int64_t prefill = 0, decode = 0, steps = 0;
  std::int64_t last_admitted = -1;
  while (!s.done()) {
    ASSERT_LT(steps, 100000) << "no progress";
    Result<StepBatch> scheduled = s.schedule();
    ASSERT_TRUE(scheduled.ok()) << scheduled.status().to_string();
    const StepBatch& b = *scheduled;
    ++steps;
    ASSERT_GE(b.num_tokens, 1);
    ASSERT_LE(b.num_tokens, config.token_budget);
    ASSERT_LE(s.num_running(), config.max_seqs);
    ASSERT_LE(s.reserved_blocks(), allocator.num_blocks());
    std::int64_t tokens = 0;
    bool seen_prefill = false;
    std::set<std::int32_t> in_batch;
    for (const ScheduledSeq& q : b.seqs) {
      const RequestState& r = s.request(q.request);
      ASSERT_TRUE(in_batch.insert(q.request).second) << "request twice in one batch";
      ASSERT_GE(q.query_len, 1);
      tokens += q.query_len;
      // Decodes come first.
      if (q.prefill) seen_prefill = true;
      ASSERT_TRUE(q.prefill || !seen_prefill) << "decode after a prefill chunk";
      ASSERT_EQ(q.context_len, r.computed);
      if (q.prefill) {
        ASSERT_LE(q.context_len + q.query_len, r.spec.prompt_tokens);
        prefill += q.query_len;
      } else {
        ASSERT_EQ(q.query_len, 1);
        ASSERT_GE(q.context_len, r.spec.prompt_tokens);
        ++decode;
      }
      // Blocks cover the new tokens, and no more than one block beyond need.
      const std::int64_t need = (q.context_len + q.query_len + config.block_size - 1) /
                                config.block_size;
      ASSERT_EQ(static_cast<std::int64_t>(r.blocks.size()), need);
    }
    ASSERT_EQ(tokens, b.num_tokens);
    // No physical block belongs to two running requests.
    std::set<std::int32_t> owned;
    std::int64_t held = 0;
    for (std::int32_t id : s.running()) {
      for (std::int32_t blk : s.request(id).blocks) {
        ASSERT_TRUE(allocator.is_allocated(blk));
        ASSERT_TRUE(owned.insert(blk).second) << "block " << blk << " shared";
        ++held;
      }
    }
    ASSERT_EQ(held, allocator.num_used());
    Result<StepOutcome> outcome = s.complete(b);
    ASSERT_TRUE(outcome.ok()) << outcome.status().to_string();
    for (std::int32_t blk : outcome->freed_blocks) ASSERT_FALSE(allocator.is_allocated(blk));
  }
  // Admission in arrival order.
  for (std::int64_t i = 0; i < s.num_requests(); ++i) {
    const RequestState& r = s.request(static_cast<std::int32_t>(i));
    EXPECT_EQ(r.phase, RequestPhase::kFinished);
    EXPECT_GE(r.admitted_step, last_admitted);
    last_admitted = r.admitted_step;
    EXPECT_EQ(r.generated, r.spec.output_tokens);
    EXPECT_EQ(r.computed, r.spec.final_kv_tokens());
    EXPECT_TRUE(r.blocks.empty());
  }
  std::int64_t want_prefill = 0, want_decode = 0;
  for (const RequestSpec& r : specs) {
    want_prefill += r.prompt_tokens;
    want_decode += r.output_tokens - 1;
  }
  EXPECT_EQ(prefill, want_prefill);
  EXPECT_EQ(decode, want_decode);
  EXPECT_EQ(allocator.num_used(), 0);
  EXPECT_LE(allocator.peak_used(), allocator.num_blocks());
  EXPECT_EQ(s.steps(), steps);
}

std::vector<RequestSpec> random_specs(int n, std::uint64_t seed, int max_prompt, int max_output) {
  std::vector<RequestSpec> specs;
  std::uint64_t x = seed;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x >> 33;
  };
  for (int i = 0; i < n; ++i) {
    RequestSpec r;
    r.prompt_tokens = 1 + static_cast<std::int64_t>(next() % max_prompt);
    r.output_tokens = 1 + static_cast<std::int64_t>(next() % max_output);
    specs.push_back(r);
  }
  return specs;
}

TEST(Scheduler, RespectsTheBudgetAndFinishesEveryRequest) {
  struct Case {
    std::int64_t budget;
    int max_seqs;
    int block_size;
    std::int64_t num_blocks;
  };
  const std::vector<RequestSpec> specs = random_specs(40, 11, 300, 40);
  for (const Case& c : {Case{64, 256, 16, 200}, Case{1, 256, 16, 200}, Case{7, 3, 5, 400},
                        Case{1000, 256, 16, 23}, Case{512, 8, 2048, 2}, Case{33, 256, 1, 400}}) {
    SCOPED_TRACE(::testing::Message() << "budget " << c.budget << " max_seqs " << c.max_seqs
                                      << " block " << c.block_size << " pool " << c.num_blocks);
    SchedulerConfig config;
    config.token_budget = c.budget;
    config.max_seqs = c.max_seqs;
    config.block_size = c.block_size;
    run_scheduler(config, specs, c.num_blocks);
  }
}

TEST(Scheduler, ChunksPrefillAndRunsDecodesFirst) {
  SchedulerConfig config;
  config.token_budget = 10;
  config.block_size = 4;
  BlockAllocator allocator = BlockAllocator::create(100, 1).value();
  Scheduler s = Scheduler::create(config, {{25, 3}, {4, 2}}, &allocator).value();
  // Step 0: request 0's first chunk takes the whole budget.
  StepBatch b = s.schedule().value();
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(b.seqs[0].query_len, 10);
  EXPECT_EQ(b.num_admitted, 1);
  ASSERT_TRUE(s.complete(b).ok());
  // Step 1: chunk 10..20.
  b = s.schedule().value();
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_EQ(b.seqs[0].context_len, 10);
  ASSERT_TRUE(s.complete(b).ok());
  // Step 2: the last 5 prompt tokens, and request 1 admitted with 4 of the 5 left.
  b = s.schedule().value();
  ASSERT_EQ(b.seqs.size(), 2u);
  EXPECT_EQ(b.seqs[0].query_len, 5);
  EXPECT_EQ(b.seqs[1].request, 1);
  EXPECT_EQ(b.seqs[1].query_len, 4);
  EXPECT_TRUE(s.finishes(b.seqs[0]) == false);
  ASSERT_TRUE(s.complete(b).ok());
  EXPECT_EQ(s.request(0).generated, 1);  // the prefill sampled the first token
  // Step 3: both decode (request 0 at position 25, request 1 at 4).
  b = s.schedule().value();
  ASSERT_EQ(b.seqs.size(), 2u);
  EXPECT_FALSE(b.seqs[0].prefill);
  EXPECT_EQ(b.seqs[0].context_len, 25);
  EXPECT_FALSE(b.seqs[1].prefill);
  EXPECT_EQ(b.seqs[1].context_len, 4);
  EXPECT_TRUE(s.finishes(b.seqs[1]));
  StepOutcome out = s.complete(b).value();
  ASSERT_EQ(out.finished.size(), 1u);
  EXPECT_EQ(out.finished[0], 1);
  EXPECT_EQ(out.freed_blocks.size(), 2u);  // 5 KV tokens in blocks of 4
  // Step 4: request 0's last decode.
  b = s.schedule().value();
  ASSERT_EQ(b.seqs.size(), 1u);
  EXPECT_TRUE(s.finishes(b.seqs[0]));
  ASSERT_TRUE(s.complete(b).ok());
  EXPECT_TRUE(s.done());
  EXPECT_EQ(allocator.num_used(), 0);
}

TEST(Scheduler, AdmissionWaitsForBlocksInsteadOfRunningOut) {
  SchedulerConfig config;
  config.token_budget = 100;
  config.block_size = 16;
  // Each request needs 2 blocks for its whole life; the pool holds 3: one at a time.
  BlockAllocator allocator = BlockAllocator::create(3, 1).value();
  Scheduler s = Scheduler::create(config, {{20, 5}, {20, 5}}, &allocator).value();
  StepBatch b = s.schedule().value();
  EXPECT_EQ(b.num_admitted, 1);
  EXPECT_TRUE(b.admission_blocked_by_memory);
  ASSERT_TRUE(s.complete(b).ok());
  run_scheduler(config, {{20, 5}, {20, 5}, {30, 3}}, 3);
}

TEST(Scheduler, RejectsRequestsThatCanNeverFit) {
  SchedulerConfig config;
  config.block_size = 16;
  BlockAllocator allocator = BlockAllocator::create(4, 1).value();
  Result<Scheduler> s = Scheduler::create(config, {{10, 2}, {100, 1}}, &allocator);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(contains(s.status().message(), "request 1")) << s.status().message();
  EXPECT_TRUE(contains(s.status().message(), "needs 7 blocks")) << s.status().message();

  EXPECT_FALSE(Scheduler::create(config, {{0, 2}}, &allocator).ok());
  config.token_budget = 0;
  EXPECT_FALSE(Scheduler::create(config, {{1, 1}}, &allocator).ok());
}

// ------------------------------------------------------------------------------ replay

ReplayConfig small_config() {
  ReplayConfig c;
  c.device = DeviceChoice::kCPU;
  c.requests = 5;
  c.max_prompt = 70;
  c.max_output = 5;
  c.token_budget = 48;
  c.verify_rows = 4;
  c.threads = 2;
  return c;
}

void expect_verified_pass(const ReplayReport& r) {
  EXPECT_TRUE(r.pass) << r.first_failure;
  EXPECT_TRUE(r.verified);
  EXPECT_GT(r.rows_checked, 0);
  EXPECT_GT(r.prefill_rows_checked, 0);
  EXPECT_GT(r.decode_rows_checked, 0);
  EXPECT_EQ(r.elements_failed, 0);
  EXPECT_EQ(r.cache_mismatches, 0);
  // Every request's whole KV is checked at its finish (prefix tokens it shared included).
  EXPECT_EQ(r.cache_tokens_checked, r.prefill_tokens + r.decode_tokens + r.prefix_hit_tokens);
  EXPECT_LE(r.worst_ratio, 1.0);
  EXPECT_EQ(r.generated_tokens, r.decode_tokens + r.requests);
}

struct ReplayCase {
  std::string model;
  KVLayout layout;
  DType dtype;
  std::optional<DType> kv_dtype;
};

std::string replay_case_name(const ::testing::TestParamInfo<ReplayCase>& info) {
  std::string name = info.param.model + "_" + to_string(info.param.layout) + "_" +
                     to_string(info.param.dtype);
  if (info.param.kv_dtype) name += std::string("_") + to_string(*info.param.kv_dtype);
  std::replace(name.begin(), name.end(), '-', '_');
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

class SmallReplay : public ::testing::TestWithParam<ReplayCase> {};

TEST_P(SmallReplay, PassesVerification) {
  ReplayConfig c = small_config();
  c.model = GetParam().model;
  c.layout = GetParam().layout;
  c.dtype = GetParam().dtype;
  c.kv_dtype = GetParam().kv_dtype;
  Result<ReplayReport> r = run_replay(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_verified_pass(*r);
  EXPECT_EQ(r->requests, 5);
  // azure-conv's first five prompts (374, 396, 879, 91, 91) are all clipped to 70.
  EXPECT_EQ(r->prefill_tokens, 5 * 70);
  EXPECT_EQ(r->prompts_clipped, 5);
  EXPECT_EQ(r->device, "cpu");
  const ModelPreset preset = find_model_preset(c.model).value();
  EXPECT_EQ(r->model.block_size, preset.block_size);
  EXPECT_EQ(r->model.page_pad, preset.page_pad);
}

std::vector<ReplayCase> replay_cases() {
  std::vector<ReplayCase> cases;
  // Every preset with every layout (bf16, the default dtype).
  for (const ModelPreset& p : model_presets()) {
    for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
      cases.push_back({p.name, layout, DType::kBFloat16, std::nullopt});
    }
  }
  // The other dtypes and the fp8 caches, on a few combinations.
  cases.push_back({"llama-3.2-1b", KVLayout::kNHD, DType::kFloat32, std::nullopt});
  cases.push_back({"llama-3.2-1b", KVLayout::kSplit, DType::kFloat16, std::nullopt});
  cases.push_back({"llama-3.2-1b", KVLayout::kHND, DType::kFloat16, DType::kFloat8E4M3});
  cases.push_back({"llama-3.1-8b", KVLayout::kSplit, DType::kBFloat16, DType::kFloat8E4M3});
  cases.push_back({"jamba-hybrid", KVLayout::kNHD, DType::kFloat16, DType::kFloat8E5M2});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Replay, SmallReplay, ::testing::ValuesIn(replay_cases()),
                         replay_case_name);

TEST(Replay, IsDeterministic) {
  ReplayConfig c = small_config();
  c.threads = 0;
  ReplayReport a = run_replay(c).value();
  c.threads = 1;  // the thread count must not change a bit of the results
  ReplayReport b = run_replay(c).value();
  EXPECT_EQ(a.steps, b.steps);
  EXPECT_EQ(a.max_abs_error, b.max_abs_error);
  EXPECT_EQ(a.worst_ratio, b.worst_ratio);
  EXPECT_EQ(a.rows_checked, b.rows_checked);
  EXPECT_EQ(a.peak_blocks_used, b.peak_blocks_used);
  c.seed = 2;
  ReplayReport other = run_replay(c).value();
  EXPECT_TRUE(other.pass) << other.first_failure;
}

TEST(Replay, MooncakeAndBlockReuse) {
  // Long Mooncake prompts clipped; a pool barely larger than one request, so blocks are
  // freed and reused many times and admission waits for memory.
  ReplayConfig c = small_config();
  c.trace = "mooncake";
  c.requests = 8;
  c.max_prompt = 100;
  c.max_output = 3;
  c.num_blocks = 8;
  // Shared prefixes would let two requests fit at once (tests/cpu/test_serving_prefix.cpp).
  c.prefix_sharing = PrefixSharing::kOff;
  Result<ReplayReport> r = run_replay(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_verified_pass(*r);
  EXPECT_EQ(r->num_blocks, 8);
  EXPECT_FALSE(r->num_blocks_auto);
  EXPECT_EQ(r->peak_running, 1);
  EXPECT_GT(r->memory_wait_steps, 0);
  EXPECT_EQ(r->prompts_clipped, 8);
  EXPECT_EQ(r->contiguous_blocks_per_request, (100 + 3 + 15) / 16);
}

// Lengths of 0 in a trace are raised to 1 and reported apart from the lengths cut to the
// limits (a raised prompt is not "clipped to --max-prompt").
TEST(Replay, ZeroLengthsAreRaisedNotClipped) {
  ReplayConfig c = small_config();
  c.trace = write_temp("zero.csv",
                       "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                       "2024-01-01 00:00:00,0,0\n"
                       "2024-01-01 00:00:01,200,2\n"
                       "2024-01-01 00:00:02,30,9\n");
  c.requests = 3;
  Result<ReplayReport> r = run_replay(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  expect_verified_pass(*r);
  EXPECT_EQ(r->prompts_raised, 1);
  EXPECT_EQ(r->outputs_raised, 1);
  EXPECT_EQ(r->prompts_clipped, 1);  // 200 > 70
  EXPECT_EQ(r->outputs_clipped, 1);  // 9 > 5
  EXPECT_EQ(r->prefill_tokens, 1 + 70 + 30);
}

TEST(Replay, InjectedFaultsAreCaught) {
  ReplayConfig c = small_config();
  c.fault = FaultInjection::kOutput;
  ReplayReport out = run_replay(c).value();
  EXPECT_FALSE(out.pass);
  EXPECT_GT(out.elements_failed, 0);
  EXPECT_TRUE(contains(out.first_failure, "step 0")) << out.first_failure;

  // A corrupted cache fools the oracle (it reads the same cache) but not the finish check.
  c.fault = FaultInjection::kCache;
  ReplayReport cache = run_replay(c).value();
  EXPECT_FALSE(cache.pass);
  EXPECT_EQ(cache.elements_failed, 0);
  EXPECT_EQ(cache.cache_mismatches, 1);
  EXPECT_TRUE(contains(cache.first_failure, "cache of request 0")) << cache.first_failure;
}

TEST(Replay, ConfigErrorsNameTheFlag) {
  struct Bad {
    const char* what;
    void (*edit)(ReplayConfig&);
    const char* message;
  };
  const Bad bads[] = {
      {"requests", [](ReplayConfig& c) { c.requests = 20000; }, "--requests 20000"},
      {"requests0", [](ReplayConfig& c) { c.requests = 0; }, "--requests 0"},
      {"budget", [](ReplayConfig& c) { c.token_budget = 0; }, "--token-budget 0"},
      {"blocks", [](ReplayConfig& c) { c.num_blocks = 2; }, "--num-blocks 2"},
      {"model", [](ReplayConfig& c) { c.model = "gpt-5"; }, "--model 'gpt-5'"},
      {"max_model_len", [](ReplayConfig& c) { c.max_model_len = 10; }, "--max-model-len 10"},
      {"dtype", [](ReplayConfig& c) { c.dtype = DType::kFloat8E4M3; }, "--dtype fp8_e4m3"},
      {"kv_dtype", [](ReplayConfig& c) { c.kv_dtype = DType::kFloat16; }, "--kv-dtype fp16"},
      {"trace", [](ReplayConfig& c) { c.trace = "nope"; }, "trace 'nope'"},
      {"verify", [](ReplayConfig& c) { c.verify_rows = -1; }, "--verify-rows -1"},
  };
  for (const Bad& bad : bads) {
    SCOPED_TRACE(bad.what);
    ReplayConfig c = small_config();
    bad.edit(c);
    Result<ReplayReport> r = run_replay(c);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(contains(r.status().message(), bad.message)) << r.status().message();
  }
}

TEST(Replay, OddBlockSizeAndPaddedPages) {
  // Overrides of the preset: a block size that is not a power of two, and padded pages.
  for (KVLayout layout : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND}) {
    SCOPED_TRACE(to_string(layout));
    ReplayConfig c = small_config();
    c.layout = layout;
    c.block_size = 3;
    c.page_pad = 24;
    Result<ReplayReport> r = run_replay(c);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    expect_verified_pass(*r);
    EXPECT_EQ(r->model.block_size, 3);
    EXPECT_EQ(r->model.page_pad, 24);
    EXPECT_EQ(r->cache_access, "strided");
  }
}

TEST(Replay, CudaIsUnavailableOrWorks) {
  ReplayConfig c = small_config();
  c.device = DeviceChoice::kCUDA;
  Result<ReplayReport> r = run_replay(c);
  if (!query_device(Device::cuda(0)).ok()) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDeviceUnavailable);
    EXPECT_TRUE(contains(r.status().message(), "--device cuda")) << r.status().message();
  } else {
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    expect_verified_pass(*r);
  }
}

TEST(Replay, VerificationCanBeSwitchedOff) {
  ReplayConfig c = small_config();
  c.verify_rows = 0;
  ReplayReport r = run_replay(c).value();
  EXPECT_FALSE(r.verified);
  EXPECT_TRUE(r.pass);
  EXPECT_EQ(r.rows_checked, 0);
  EXPECT_EQ(r.cache_tokens_checked, 0);
}

}  // namespace
}  // namespace pagedattn::serving
