// A CUDA device described by hand, for host-only tests of kernel selection and planning: no
// GPU is queried. Defaults are an H100/H200 (132 SMs, compute capability 9.0, 227 KiB of
// opt-in shared memory per block).
#pragma once

#include <cstdint>

#include "pagedattn/pagedattn.h"

namespace pagedattn::testing {

inline constexpr std::int64_t kH200SharedMemoryPerBlock = 232448;  // opt-in bytes on sm_90
inline constexpr int kH200Units = 132;

/// DeviceInfo of CUDA device 0 with `max_shared_memory_per_block` bytes (opt-in), `num_units`
/// SMs and compute capability `cc_major`.x.
inline DeviceInfo synthetic_cuda_device(std::int64_t max_shared_memory_per_block = kH200SharedMemoryPerBlock,
                                        int num_units = kH200Units, int cc_major = 9) {
  DeviceInfo info;
  info.device = Device::cuda(0);
  info.name = "synthetic";
  info.num_units = num_units;
  info.cc_major = cc_major;
  info.max_shared_memory_per_block = max_shared_memory_per_block;
  return info;
}

}  // namespace pagedattn::testing
