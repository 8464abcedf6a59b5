// Model presets and the parsing of the `run` job's named flag values (--model, --device,
// --kv-dtype, --inject-fault) into replay.h's types.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "src/serving/replay.h"
#include "src/serving/serving_util.h"

namespace pagedattn::serving {

using detail::invalid;

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {
      {"llama-3.2-1b", 32, 8, 64, 16, 0, "Llama 3.2 1B: 32 query / 8 KV heads, head 64, block 16"},
      {"llama-3.1-8b", 32, 8, 128, 16, 0,
       "Llama 3.1 8B: 32 query / 8 KV heads, head 128, block 16"},
      // Hybrid attention/Mamba models (Jamba) share one page size between attention blocks and
      // Mamba state, so attention blocks are large (vLLM uses 2048 for Jamba) and pages carry
      // padding: the block stride exceeds the block's elements. 4096 padding elements keep
      // every block 16-byte aligned for every dtype (fp8 included).
      {"jamba-hybrid", 32, 8, 128, 2048, 4096,
       "Jamba-style hybrid layer: 32 query / 8 KV heads, head 128, block 2048, pages padded by "
       "4096 elements"},
  };
  return presets;
}

Result<ModelPreset> find_model_preset(const std::string& name) {
  std::string names;
  for (const ModelPreset& p : model_presets()) {
    if (p.name == name) return p;
    names += fmt::format("{}{}", names.empty() ? "" : ", ", p.name);
  }
  return invalid(fmt::format("--model '{}': expected one of {}", name, names));
}

const char* to_string(DeviceChoice choice) {
  switch (choice) {
    case DeviceChoice::kAuto: return "auto";
    case DeviceChoice::kCPU: return "cpu";
    case DeviceChoice::kCUDA: return "cuda";
  }
  return "unknown";
}

Result<DeviceChoice> parse_device_choice(const std::string& name) {
  if (name == "auto") return DeviceChoice::kAuto;
  if (name == "cpu") return DeviceChoice::kCPU;
  // cuda:0 as verify and explain spell it; the replay runs on device 0 only.
  if (name == "cuda" || name == "cuda:0") return DeviceChoice::kCUDA;
  if (name.rfind("cuda:", 0) == 0)
    return invalid(fmt::format("--device '{}': the replay runs on cuda:0 only", name));
  return invalid(fmt::format("--device '{}': expected cpu, cuda, cuda:0 or auto", name));
}

Result<std::optional<DType>> parse_kv_dtype(const std::string& name) {
  if (name == "auto") return std::optional<DType>();
  if (name == "fp8_e4m3") return std::optional<DType>(DType::kFloat8E4M3);
  if (name == "fp8_e5m2") return std::optional<DType>(DType::kFloat8E5M2);
  return invalid(fmt::format("--kv-dtype '{}': expected auto, fp8_e4m3 or fp8_e5m2", name));
}

const char* to_string(FaultInjection fault) {
  switch (fault) {
    case FaultInjection::kNone: return "none";
    case FaultInjection::kOutput: return "output";
    case FaultInjection::kCache: return "cache";
    case FaultInjection::kBoth: return "both";
  }
  return "unknown";
}

Result<FaultInjection> parse_fault_injection(const std::string& name) {
  if (name == "none") return FaultInjection::kNone;
  if (name == "output") return FaultInjection::kOutput;
  if (name == "cache") return FaultInjection::kCache;
  if (name == "both") return FaultInjection::kBoth;
  return invalid(fmt::format("--inject-fault '{}': expected none, output, cache or both", name));
}

const char* to_string(PrefixSharing mode) {
  switch (mode) {
    case PrefixSharing::kAuto: return "auto";
    case PrefixSharing::kOn: return "on";
    case PrefixSharing::kOff: return "off";
  }
  return "unknown";
}

Result<PrefixSharing> parse_prefix_sharing(const std::string& name) {
  if (name == "auto") return PrefixSharing::kAuto;
  if (name == "on") return PrefixSharing::kOn;
  if (name == "off") return PrefixSharing::kOff;
  return invalid(fmt::format("--prefix-sharing '{}': expected auto, on or off", name));
}

}  // namespace pagedattn::serving
