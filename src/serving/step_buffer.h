// Device memory of the replay: one growing CUDA allocation, and a per-step tensor's host
// bytes with their device copy. Internal to src/serving.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include "pagedattn/status.h"
#include "src/cuda/backend/cuda_backend.h"

namespace pagedattn::serving::detail {

// Owner of one CUDA allocation that grows on demand (per-step tensors keep their capacity).
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  ~DeviceMemory() { release(); }

  Status reserve(std::size_t bytes) {
    if (bytes <= capacity_ && ptr_ != nullptr) return Status::Ok();
    release();
    Result<void*> ptr = cuda::device_malloc(std::max<std::size_t>(bytes, 1));
    if (!ptr.ok()) return ptr.status();
    ptr_ = *ptr;
    capacity_ = std::max<std::size_t>(bytes, 1);
    return Status::Ok();
  }
  void* get() const { return ptr_; }
  std::size_t capacity() const { return capacity_; }

 private:
  void release() {
    if (ptr_ != nullptr) cuda::device_free(ptr_);
    ptr_ = nullptr;
    capacity_ = 0;
  }
  void* ptr_ = nullptr;
  std::size_t capacity_ = 0;
};

// A per-step tensor: host bytes, plus a device copy when the replay runs on CUDA.
struct StepBuffer {
  std::vector<unsigned char> host;
  DeviceMemory device;

  void resize(std::size_t bytes) { host.resize(bytes); }
  // The memory the compute device reads: the host bytes on the CPU, the device copy on CUDA.
  Status upload(bool on_cuda) {
    if (!on_cuda || host.empty()) return Status::Ok();
    PAGEDATTN_RETURN_IF_ERROR(device.reserve(host.size()));
    return cuda::copy_to_device(device.get(), host.data(), host.size());
  }
  Status download(bool on_cuda) {
    if (!on_cuda || host.empty()) return Status::Ok();
    return cuda::copy_to_host(host.data(), device.get(), host.size());
  }
  void* data(bool on_cuda) { return on_cuda ? device.get() : host.data(); }
  template <class T>
  T* as() {
    return reinterpret_cast<T*>(host.data());
  }
};

}  // namespace pagedattn::serving::detail
