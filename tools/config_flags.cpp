#include "tools/config_flags.h"

#include "tools/commands.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "pagedattn/kv_cache.h"
#include "pagedattn/select.h"
#include "src/serving/replay.h"

namespace pagedattn::cli {

namespace {
Status invalid(const std::string& message) { return Status(StatusCode::kInvalidArgument, message); }

// One wording for the flag check (what was typed) and to_case_config (the parsed value).
constexpr const char* kScaleRange = "a finite value > 0 (0 = derived from the data)";
constexpr const char* kSoftcapRange = "a finite value >= 0 (0 = off)";
}  // namespace

void add_config_flags(CLI::App* app, ConfigFlags* f) {
  app->add_option("--device", f->device, "cpu | cuda[:N] | auto")->capture_default_str();
  app->add_option("--layout", f->layout, "KV cache layout: split | nhd | hnd")
      ->capture_default_str();
  app->add_option("--num-heads", f->num_heads, "query heads")->capture_default_str();
  app->add_option("--num-kv-heads", f->num_kv_heads, "KV heads (num_heads % num_kv_heads == 0)")
      ->capture_default_str();
  app->add_option("--head-size", f->head_size, "elements per head")->capture_default_str();
  app->add_option("--block-size", f->block_size, "tokens per cache block")->capture_default_str();
  app->add_option("--dtype", f->dtype, "query/output dtype: fp32 | fp16 | bf16")
      ->capture_default_str();
  app->add_option("--kv-dtype", f->kv_dtype, "cache dtype: auto | fp8_e4m3 | fp8_e5m2")
      ->capture_default_str();
  app->add_option("--seq-lens", f->seq_lens,
                  "KV length of each sequence including its new tokens, comma separated")
      ->capture_default_str();
  f->query_lens_option =
      app->add_option("--query-lens", f->query_lens,
                      "new tokens of each sequence (default: 1 each; 0 skips a sequence)");
  app->add_option("--sliding-window", f->sliding_window, "window length in keys (0 = off)")
      ->capture_default_str();
  app->add_option("--softcap", f->softcap, "logit softcap (0 = off)")
      ->transform(float_flag(kSoftcapRange))
      ->capture_default_str();
  app->add_flag("--alibi", f->alibi, "ALiBi slopes drawn from the seed");
  app->add_flag("--sinks", f->sinks, "per-head sink logits drawn from the seed");
  app->add_option("--page-pad", f->page_pad,
                  "extra elements after each K and V block (padded pages)")
      ->capture_default_str();
  app->add_option("--seed", f->seed, "input seed")->check(kNonNegativeInteger)->capture_default_str();
  app->add_option("--k-scale", f->k_scale, "fp8 key scale, fp8 caches only (0 = derived from the data)")
      ->transform(float_flag(kScaleRange))
      ->capture_default_str();
  app->add_option("--v-scale", f->v_scale, "fp8 value scale, fp8 caches only (0 = derived from the data)")
      ->transform(float_flag(kScaleRange))
      ->capture_default_str();
  app->add_option("--scales", f->scales,
                  "fp8 scales as host scalars, device tensors of one element, or one per KV "
                  "head (0.5x..2x the scale): host | tensor | per-head")
      ->capture_default_str();
  app->add_flag("--batch-invariant", f->batch_invariant,
                "split points fixed in tokens: a sequence's bits are the same alone or in any "
                "batch (PlanOptions::batch_invariant)");
  app->add_option("--tile-tokens", f->tile_tokens, "force KV tokens per tile (0 = chosen)")
      ->capture_default_str();
  app->add_option("--num-splits", f->num_splits, "force KV splits per sequence (0 = chosen)")
      ->capture_default_str();
  app->add_flag("--json", f->json, "machine-readable output");
}

Result<Device> resolve_device(const std::string& name, bool quiet) {
  if (name == "cpu") return Device::cpu();
  if (name == "auto") {
    // The choice is reported on stderr (stdout may be --json), so that a machine without a
    // usable GPU does not pass a CPU run off as the GPU's.
    if (!built_with_cuda()) {
      if (!quiet)
        fmt::print(stderr, "pagedattn: --device auto: this build has no CUDA backend; using the CPU\n");
      return Device::cpu();
    }
    auto info = query_device(Device::cuda(0));
    if (info.ok()) return Device::cuda(0);
    if (!quiet)
      fmt::print(stderr, "pagedattn: --device auto: {}; using the CPU\n", info.status().message());
    return Device::cpu();
  }
  if (name.rfind("cuda", 0) == 0) {
    int index = 0;
    if (name.size() > 4) {
      if (name[4] != ':' || name.size() == 5)
        return invalid("--device " + name + ": expected cpu, cuda, cuda:N or auto");
      char* end = nullptr;
      errno = 0;
      const long v = std::strtol(name.c_str() + 5, &end, 10);
      if (*end != '\0' || errno != 0 || v < 0 || v > 1024)
        return invalid("--device " + name + ": expected cpu, cuda, cuda:N or auto");
      index = static_cast<int>(v);
    }
    const Device dev = Device::cuda(index);
    // Nothing runs on a quietly resolved device, so it need not exist.
    if (quiet) return dev;
    auto info = query_device(dev);
    if (!info.ok())
      return Status(StatusCode::kDeviceUnavailable,
                    "--device " + name + ": " + info.status().message());
    return dev;
  }
  return invalid("--device " + name + ": expected cpu, cuda, cuda:N or auto");
}

Result<std::vector<int>> parse_int_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  if (text.empty()) return invalid(std::string(flag) + ": empty list");
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    std::string item =
        text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    // "1, 17, 544" reads as typed: blanks around an item are not part of it (strtol would skip
    // leading ones only).
    const std::size_t first = item.find_first_not_of(" \t");
    item = first == std::string::npos
               ? std::string()
               : item.substr(first, item.find_last_not_of(" \t") - first + 1);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0')
      return invalid(std::string(flag) + " " + text + ": '" + item + "' is not an integer");
    if (errno != 0 || v > 0x7FFFFFFF || v < -0x7FFFFFFF)
      return invalid(std::string(flag) + " " + text + ": '" + item +
                     "' is out of range (at most 2147483647)");
    if (v < 0) return invalid(std::string(flag) + " " + text + ": '" + item + "' is negative");
    out.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<testing::CaseConfig> to_case_config(const ConfigFlags& f, Device device) {
  testing::CaseConfig c;
  c.device = device;
  auto layout = parse_layout(f.layout);
  if (!layout.ok()) return invalid("--" + layout.status().message());
  c.layout = *layout;
  auto dtype = parse_dtype(f.dtype);
  if (!dtype.ok() ||
      !(*dtype == DType::kFloat32 || *dtype == DType::kFloat16 || *dtype == DType::kBFloat16))
    return invalid("--dtype " + f.dtype + ": expected fp32, fp16 or bf16");
  c.dtype = *dtype;
  auto kv = serving::parse_kv_dtype(f.kv_dtype);  // the one parser `run` uses too
  if (!kv.ok()) return kv.status();
  c.kv_dtype = kv->value_or(c.dtype);
  if (f.num_heads <= 0)
    return invalid("--num-heads " + std::to_string(f.num_heads) + ": expected > 0");
  if (f.num_kv_heads <= 0)
    return invalid("--num-kv-heads " + std::to_string(f.num_kv_heads) + ": expected > 0");
  if (f.num_heads % f.num_kv_heads != 0)
    return invalid("--num-heads " + std::to_string(f.num_heads) +
                   " is not a multiple of --num-kv-heads " + std::to_string(f.num_kv_heads));
  if (f.head_size <= 0)
    return invalid("--head-size " + std::to_string(f.head_size) + ": expected > 0");
  if (f.block_size <= 0)
    return invalid("--block-size " + std::to_string(f.block_size) + ": expected > 0");
  c.num_heads = f.num_heads;
  c.num_kv_heads = f.num_kv_heads;
  c.head_size = f.head_size;
  c.block_size = f.block_size;

  auto seq_lens = parse_int_list(f.seq_lens, "--seq-lens");
  if (!seq_lens.ok()) return seq_lens.status();
  c.seq_lens = *seq_lens;
  const bool query_lens_given = f.query_lens_option != nullptr && f.query_lens_option->count() > 0;
  if (!query_lens_given) {
    c.query_lens.assign(c.seq_lens.size(), 1);
  } else {
    auto q = parse_int_list(f.query_lens, "--query-lens");
    if (!q.ok()) return q.status();
    c.query_lens = *q;
  }
  if (c.query_lens.size() != c.seq_lens.size())
    return invalid("--query-lens has " + std::to_string(c.query_lens.size()) +
                   " entries but --seq-lens has " + std::to_string(c.seq_lens.size()) +
                   ": one entry per sequence");
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
    if (c.query_lens[i] > c.seq_lens[i])
      return invalid("sequence " + std::to_string(i) + ": --query-lens entry " +
                     std::to_string(c.query_lens[i]) +
                     (query_lens_given ? "" : " (the default: one new token each)") +
                     " > --seq-lens entry " + std::to_string(c.seq_lens[i]) +
                     " (seq_len includes the new tokens; --query-lens 0 skips a sequence)");
  }
  if (f.sliding_window < 0)
    return invalid("--sliding-window " + std::to_string(f.sliding_window) +
                   ": expected >= 0 (0 = off)");
  if (!(std::isfinite(f.softcap) && f.softcap >= 0))
    return invalid("--softcap " + fmt::format("{}", f.softcap) + ": expected " + kSoftcapRange);
  if (f.page_pad < 0)
    return invalid("--page-pad " + std::to_string(f.page_pad) + ": expected >= 0");
  if (!(std::isfinite(f.k_scale) && f.k_scale >= 0))
    return invalid("--k-scale " + fmt::format("{}", f.k_scale) + ": expected " + kScaleRange);
  if (!(std::isfinite(f.v_scale) && f.v_scale >= 0))
    return invalid("--v-scale " + fmt::format("{}", f.v_scale) + ": expected " + kScaleRange);
  // Only an fp8 cache is scaled (DESIGN.md §2.6): a scale other than the default 1 given for
  // another cache would be accepted and silently ignored (DESIGN.md §5): a usage error.
  if (!is_fp8(c.kv_dtype) && (f.k_scale != 1.f || f.v_scale != 1.f))
    return invalid(std::string(f.k_scale != 1.f ? "--k-scale" : "--v-scale") +
                   " applies to an fp8 cache only (--kv-dtype fp8_e4m3 or fp8_e5m2); the cache "
                   "here is " + to_string(c.kv_dtype));
  if (f.scales == "host") {
    c.scales = testing::ScaleMode::kHost;
  } else if (f.scales == "tensor") {
    c.scales = testing::ScaleMode::kTensor;
  } else if (f.scales == "per-head") {
    c.scales = testing::ScaleMode::kPerHead;
  } else {
    return invalid("--scales " + f.scales + ": expected host, tensor or per-head");
  }
  if (c.scales != testing::ScaleMode::kHost && !is_fp8(c.kv_dtype))
    return invalid("--scales " + f.scales +
                   " applies to an fp8 cache only (--kv-dtype fp8_e4m3 or fp8_e5m2); the cache "
                   "here is " + to_string(c.kv_dtype));
  if (f.tile_tokens < 0)
    return invalid("--tile-tokens " + std::to_string(f.tile_tokens) + ": expected >= 0");
  if (f.num_splits < 0)
    return invalid("--num-splits " + std::to_string(f.num_splits) + ": expected >= 0");
  c.sliding_window = f.sliding_window;
  c.softcap = f.softcap;
  c.alibi = f.alibi;
  c.sinks = f.sinks;
  c.page_pad = f.page_pad;
  c.seed = f.seed;
  c.k_scale = f.k_scale;
  c.v_scale = f.v_scale;
  c.plan.tile_tokens = f.tile_tokens;
  c.plan.num_splits = f.num_splits;
  c.plan.batch_invariant = f.batch_invariant;
  c.name = testing::case_name(c);
  return c;
}

}  // namespace pagedattn::cli
