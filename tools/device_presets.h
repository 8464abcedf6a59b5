// Devices described by hand, for `pagedattn explain --assume-device NAME`: the selection
// function (select_kernel) is host code that reads only a DeviceInfo, so its decision for an
// H200 can be checked on a machine without one, a CPU-only build included. The values are the
// ones the CUDA runtime reports on those GPUs (cudaDevAttrMaxSharedMemoryPerBlockOptin,
// multiProcessorCount, l2CacheSize; the H200's as docs/results/bench_v16_2026-11-30_h200.json
// recorded them) and tests/unit/synthetic_device.h uses.
#pragma once

#include <cstdint>
#include <string>

#include "pagedattn/select.h"
#include "pagedattn/status.h"

namespace pagedattn::cli {

/// The names --assume-device takes, for messages and --help.
inline constexpr const char* kAssumableDevices = "h200, h100";

/// DeviceInfo of a preset GPU as CUDA device 0: "h200" (NVIDIA H200: 132 SMs, compute
/// capability 9.0, 232448 bytes = 227 KiB of opt-in shared memory per block, 60 MiB of L2) or
/// "h100" (NVIDIA H100 SXM: the same SMs and shared memory, 50 MiB of L2).
/// Errors: kInvalidArgument naming `--assume-device` for other names.
inline Result<DeviceInfo> assumed_device(const std::string& name) {
  DeviceInfo info;
  info.device = Device::cuda(0);
  info.num_units = 132;
  info.cc_major = 9;
  info.cc_minor = 0;
  info.max_shared_memory_per_block = 232448;
  if (name == "h200") {
    info.name = "NVIDIA H200 (assumed)";
    info.l2_bytes = std::int64_t{60} << 20;
  } else if (name == "h100") {
    info.name = "NVIDIA H100 SXM (assumed)";
    info.l2_bytes = std::int64_t{50} << 20;
  } else {
    return Status(StatusCode::kInvalidArgument, "--assume-device '" + name +
                                                    "': expected one of " + kAssumableDevices);
  }
  return info;
}

}  // namespace pagedattn::cli
