// The attention-configuration flags that `pagedattn verify` and `pagedattn explain` share
// (DESIGN.md §7), and their conversion into a test case configuration.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"
#include "src/testing/harness.h"

namespace pagedattn::cli {

/// Raw flag values, as typed. Defaults: a small GQA-4 fp16 decode batch.
struct ConfigFlags {
  std::string device = "auto";
  std::string layout = "nhd";
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_size = 128;
  int block_size = 16;
  std::string dtype = "fp16";
  std::string kv_dtype = "auto";
  std::string seq_lens = "1,17,544";
  std::string query_lens;  // not given = 1 for every sequence
  /// The --query-lens option, to tell "not given" (the default) from an empty list (an error).
  const CLI::Option* query_lens_option = nullptr;
  int sliding_window = 0;
  float softcap = 0.0f;
  bool alibi = false;
  bool sinks = false;
  std::int64_t page_pad = 0;
  std::uint64_t seed = 1;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  /// fp8 scales as host scalars, `[1]` device tensors, or `[num_kv_heads]` device tensors
  /// (testing::ScaleMode): host | tensor | per-head.
  std::string scales = "host";
  int tile_tokens = 0;
  int num_splits = 0;
  bool batch_invariant = false;
  bool json = false;
};

/// Register the shared flags (and --json) on `app`; values land in `*flags`, which must
/// outlive parsing. --softcap, --k-scale and --v-scale are checked as typed (float_flag): a
/// value that overflows a float or underflows to 0 is a parse error naming the text.
void add_config_flags(CLI::App* app, ConfigFlags* flags);

/// `--device`: "cpu", "cuda" / "cuda:N", or "auto" (CUDA when query_device(cuda:0) succeeds,
/// else the CPU, with a line on stderr saying why). Errors: kInvalidArgument for other spellings, kDeviceUnavailable when CUDA is
/// asked for and this build or machine has none. `quiet`: for a command that runs nothing on
/// the device (verify --list-cases): no line on stderr, and "cuda" / "cuda:N" is that device
/// whether or not it exists ("auto" still picks the device a run would use).
Result<Device> resolve_device(const std::string& name, bool quiet = false);

/// "1,17,544" -> {1, 17, 544}. Errors: kInvalidArgument naming `flag` for an empty list, an
/// entry that is not an integer, or a negative entry.
Result<std::vector<int>> parse_int_list(const std::string& text, const char* flag);

/// The case described by `flags` on `device`. Checks what the flags themselves can get wrong
/// (unknown names, negative window/softcap/padding, list lengths that differ, query_len >
/// seq_len); limits of the library (head sizes, fp8 split) are left to the library.
/// Errors: kInvalidArgument naming the flag.
Result<testing::CaseConfig> to_case_config(const ConfigFlags& flags, Device device);

}  // namespace pagedattn::cli
