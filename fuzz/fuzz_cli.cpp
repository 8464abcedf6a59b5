// libFuzzer target: the command line's configuration flags (tools/config_flags.h) from
// arbitrary argument lists: CLI11 parsing of the shared flags, parse_int_list,
// resolve_device and to_case_config. An accepted configuration must be one the harness can
// describe (lists of equal length, lengths >= 0).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/config_flags.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace pagedattn;
  // Arguments are separated by NUL bytes, as in argv.
  std::vector<std::string> args{"pagedattn-verify"};
  std::string cur;
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur), cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  if (args.size() > 40) return 0;
  const auto fail = [](const std::string& what) {
    std::fprintf(stderr, "fuzz_cli: %s\n", what.c_str());
    std::abort();
  };
  for (std::size_t i = 1; i < args.size(); ++i) {
    auto list = cli::parse_int_list(args[i], "--seq-lens");
    if (list.ok())
      for (int v : *list)
        if (v < 0) fail("parse_int_list accepted a negative entry");
  }
  CLI::App app{"fuzz"};
  cli::ConfigFlags flags;
  cli::add_config_flags(&app, &flags);
  std::vector<const char*> argv;
  for (const auto& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError&) {
    return 0;
  }
  if (flags.device == "auto") flags.device = "cpu";  // no device probing (and its message)
  auto device = cli::resolve_device(flags.device);
  if (!device.ok()) return 0;
  auto config = cli::to_case_config(flags, *device);
  if (!config.ok()) {
    if (config.status().code() != StatusCode::kInvalidArgument) fail(config.status().to_string());
    return 0;
  }
  if (config->seq_lens.size() != config->query_lens.size()) fail("list lengths differ");
  for (std::size_t s = 0; s < config->seq_lens.size(); ++s)
    if (config->seq_lens[s] < 0 || config->query_lens[s] < 0 ||
        config->query_lens[s] > config->seq_lens[s])
      fail("a negative length or query_len > seq_len accepted");
  (void)testing::case_name(*config);
  return 0;
}
