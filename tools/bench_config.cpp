#include "tools/bench_config.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include <CLI/CLI.hpp>

#include "tools/config_flags.h"

namespace pagedattn::cli {

namespace {

Status invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, message); }

std::string trim(const std::string& s) {
  const std::size_t a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return std::string();
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

/// "N" as a non-negative integer below 2^31; false otherwise.
bool parse_count(const std::string& s, long* out) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos || s.size() > 10)
    return false;
  errno = 0;
  const long v = std::strtol(s.c_str(), nullptr, 10);
  if (errno != 0 || v > 0x7FFFFFFF) return false;
  *out = v;
  return true;
}

}  // namespace

Result<std::string> expand_lengths(const std::string& text, const char* flag) {
  constexpr long kMaxEntries = 1L << 24;
  std::string out;
  long entries = 0;
  std::string term;
  bool any = false;
  // ',' and '+' both separate terms.
  std::string normalised = text;
  for (char& ch : normalised)
    if (ch == '+') ch = ',';
  std::stringstream ss(normalised);
  while (std::getline(ss, term, ',')) {
    any = true;
    term = trim(term);
    const std::size_t x = term.find_first_of("xX*");
    if (x == std::string::npos) {
      // A plain length: parse_int_list checks it.
      out += (out.empty() ? "" : ",") + term;
      if (++entries > kMaxEntries) break;
      continue;
    }
    long count = 0;
    const std::string n = trim(term.substr(0, x)), len = trim(term.substr(x + 1));
    if (!parse_count(n, &count))
      return invalid(std::string(flag) + " " + text + ": '" + term +
                     "': expected LENGTH or COUNTxLENGTH with a count in [0, 2^31)");
    long length = 0;
    if (!parse_count(len, &length))
      return invalid(std::string(flag) + " " + text + ": '" + term +
                     "': expected COUNTxLENGTH with a length in [0, 2^31)");
    if (entries + count > kMaxEntries) {
      entries += count;
      break;
    }
    for (long i = 0; i < count; ++i) out += (out.empty() ? "" : ",") + len;
    entries += count;
  }
  if (entries > kMaxEntries)
    return invalid(std::string(flag) + " " + text + ": more than 2^24 sequences");
  if (!any || out.empty()) return invalid(std::string(flag) + ": empty list");
  return out;
}

Result<testing::CaseConfig> parse_bench_config(const std::string& text, std::uint64_t bench_seed,
                                               int bench_splits) {
  ConfigFlags f;
  // The W1 shape (DESIGN.md §6), so that "--kv-dtype fp8_e4m3" alone is the fp8 W1.
  f.num_heads = 32;
  f.num_kv_heads = 8;
  f.head_size = 128;
  f.block_size = 16;
  f.dtype = "bf16";
  f.seq_lens = "64x4096";
  CLI::App app("--config");
  app.set_help_flag();  // "--help" inside a --config is an unknown flag, not a help request
  add_config_flags(&app, &f);
  auto where = [&](const std::string& m) { return invalid("--config '" + text + "': " + m); };
  try {
    app.parse(text, /*program_name_included=*/false);
  } catch (const CLI::ParseError& e) {
    return where(e.what());
  }
  for (const char* own : {"--device", "--json"})
    if (app.get_option(own)->count() > 0)
      return where(std::string(own) + " is a flag of bench itself: give it outside --config");
  // The bench stores its fp8 scales as host scalars only: a device-tensor mode (verify's
  // --scales, where the build has it) would be timed as something it is not.
  if (const CLI::Option* scales = app.get_option_no_throw("--scales");
      scales != nullptr && scales->count() > 0 && scales->as<std::string>() != "host")
    return where("--scales " + scales->as<std::string>() +
                 ": the bench times host-scalar fp8 scales only (`pagedattn verify` checks the "
                 "device-tensor modes)");
  auto seq = expand_lengths(f.seq_lens, "--seq-lens");
  if (!seq.ok()) return where(seq.status().message());
  f.seq_lens = *seq;
  if (f.query_lens_option != nullptr && f.query_lens_option->count() > 0) {
    auto q = expand_lengths(f.query_lens, "--query-lens");
    if (!q.ok()) return where(q.status().message());
    f.query_lens = *q;
  }
  if (app.get_option("--seed")->count() == 0) f.seed = bench_seed;
  auto c = to_case_config(f, Device::cuda(0));
  if (!c.ok()) return where(c.status().message());
  if (bench_splits > 0) {
    if (c->plan.num_splits > 0 && c->plan.num_splits != bench_splits)
      return where("--num-splits " + std::to_string(c->plan.num_splits) +
                   " contradicts bench's --splits " + std::to_string(bench_splits));
    c->plan.num_splits = bench_splits;
  }
  c->name = testing::case_name(*c);
  return c;
}

std::vector<BenchRow> matrix_rows(std::uint64_t seed, int splits) {
  struct Dtypes {
    const char* name;
    DType query, cache;
  };
  const Dtypes dtypes[] = {{"bf16", DType::kBFloat16, DType::kBFloat16},
                           {"fp16", DType::kFloat16, DType::kFloat16},
                           {"fp8_e4m3", DType::kBFloat16, DType::kFloat8E4M3},
                           {"fp8_e5m2", DType::kBFloat16, DType::kFloat8E5M2}};
  struct Lengths {
    const char* name;
    std::vector<int> lens;
    const char* even;  // the even row of a skewed one
  };
  std::vector<int> w6(64, 512), w8(256, 512);
  w6[0] = 32768;
  w8[255] = 131072;
  const std::vector<Lengths> lengths = {
      {"64x4096", std::vector<int>(64, 4096), ""},
      {"64x1016", std::vector<int>(64, 1016), ""},
      {"1x32768+63x512", w6, "64x1016"},
      {"256x1022", std::vector<int>(256, 1022), ""},
      {"255x512+1x131072", w8, "256x1022"},
  };
  std::vector<BenchRow> rows;
  for (const Dtypes& dt : dtypes)
    for (int head : {64, 80, 96, 128, 256, 512})
      for (KVLayout layout : {KVLayout::kNHD, KVLayout::kSplit})
        for (const Lengths& l : lengths) {
          BenchRow r;
          const std::string prefix =
              std::string(dt.name) + "/h" + std::to_string(head) + "/" + to_string(layout) + "/";
          r.name = prefix + l.name;
          if (*l.even) r.even_row = prefix + l.even;
          testing::CaseConfig& c = r.config;
          c.device = Device::cuda(0);
          c.layout = layout;
          c.num_heads = 32;
          c.num_kv_heads = 8;
          c.head_size = head;
          c.block_size = 16;
          c.dtype = dt.query;
          c.kv_dtype = dt.cache;
          c.seq_lens = l.lens;
          c.query_lens.assign(l.lens.size(), 1);
          c.lse = false;
          c.seed = seed;
          c.plan.num_splits = splits;
          c.name = testing::case_name(c);
          rows.push_back(std::move(r));
        }
  return rows;
}

std::vector<BenchRow> filter_rows(const std::vector<BenchRow>& rows, const std::string& filter) {
  std::vector<std::string> terms;
  std::stringstream ss(filter);
  for (std::string t; std::getline(ss, t, ',');)
    if (!trim(t).empty()) terms.push_back(trim(t));
  std::vector<BenchRow> out;
  for (const BenchRow& r : rows) {
    bool all = true;
    for (const std::string& t : terms) all &= r.name.find(t) != std::string::npos;
    if (all) out.push_back(r);
  }
  return out;
}

bench::Workload to_workload(const testing::CaseConfig& c, const std::string& name,
                            const std::string& group) {
  bench::Workload w;
  w.name = name;
  w.description = c.name;
  w.group = group;
  w.num_heads = c.num_heads;
  w.num_kv_heads = c.num_kv_heads;
  w.head_size = c.head_size;
  w.block_size = c.block_size;
  w.layout = c.layout;
  w.dtype = c.dtype;
  w.kv_dtype = c.kv_dtype;
  w.page_pad = c.page_pad;
  w.seq_lens = c.seq_lens;
  w.query_lens = c.query_lens;
  w.softcap = c.softcap;
  w.sliding_window = c.sliding_window;
  w.alibi = c.alibi;
  w.sinks = c.sinks;
  w.k_scale = c.k_scale > 0 ? c.k_scale : 1.0f;
  w.v_scale = c.v_scale > 0 ? c.v_scale : 1.0f;
  w.scale = testing::case_scale(c);
  return w;
}

testing::CaseConfig to_case_config(const bench::Workload& w, const PlanOptions& plan) {
  testing::CaseConfig c;
  c.device = Device::cuda(0);
  c.layout = w.layout;
  c.num_heads = w.num_heads;
  c.num_kv_heads = w.num_kv_heads;
  c.head_size = w.head_size;
  c.block_size = w.block_size;
  c.dtype = w.dtype;
  c.kv_dtype = w.kv_dtype;
  c.page_pad = w.page_pad;
  c.seq_lens = w.seq_lens;
  c.query_lens = w.query_lens.empty() ? std::vector<int>(w.seq_lens.size(), 1) : w.query_lens;
  c.softcap = w.softcap;
  c.sliding_window = w.sliding_window;
  c.alibi = w.alibi;
  c.sinks = w.sinks;
  c.k_scale = w.k_scale;
  c.v_scale = w.v_scale;
  c.lse = false;
  c.plan = plan;
  c.name = testing::case_name(c);
  return c;
}

}  // namespace pagedattn::cli
