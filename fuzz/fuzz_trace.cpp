// libFuzzer target: the trace parsers (Azure CSV, Mooncake JSON lines) on arbitrary text.
// An accepted trace must keep the invariants trace.h promises: at least one record, at most
// max_records, arrival times from 0 and never decreasing, token counts >= 0 whose sum fits
// int32.
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "src/serving/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pagedattn;
  if (size < 1) return 0;
  const bool mooncake = data[0] & 1;
  const std::int64_t max_records = (data[0] >> 1) & 7;  // 0 = all
  std::istringstream text(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  auto records = mooncake ? serving::parse_mooncake_jsonl(text, "fuzz", max_records)
                          : serving::parse_azure_csv(text, "fuzz", max_records);
  const auto fail = [](const char* what) {
    std::fprintf(stderr, "fuzz_trace: %s\n", what);
    std::abort();
  };
  if (!records.ok()) {
    if (records.status().code() != StatusCode::kInvalidArgument) fail("not kInvalidArgument");
    return 0;
  }
  if (records->empty()) fail("an accepted trace without records");
  if (max_records > 0 && static_cast<std::int64_t>(records->size()) > max_records)
    fail("more records than max_records");
  if ((*records)[0].arrival_s != 0) fail("first arrival is not 0");
  double last = 0;
  for (const auto& r : *records) {
    if (!(r.arrival_s >= last)) fail("arrival time steps back");
    last = r.arrival_s;
    if (r.prompt_tokens < 0 || r.output_tokens < 0) fail("negative token count");
    if (r.prompt_tokens + r.output_tokens > 0x7FFFFFFF) fail("token counts do not fit int32");
  }
  return 0;
}
