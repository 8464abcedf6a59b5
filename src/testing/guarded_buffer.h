// Memory on a case's device with guard regions around the payload (DESIGN.md §4: "guard
// regions around every buffer stay intact"), for the test harness (harness.cpp); internal to
// src/testing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pagedattn/status.h"
#include "pagedattn/tensor.h"
#include "src/cuda/backend/cuda_backend.h"

namespace pagedattn::testing::detail {

inline constexpr std::uint8_t kGuardByte = 0xC3;
/// Guard bytes on each side of every buffer the library writes; a multiple of 16 so that the
/// payload keeps the allocation's alignment.
inline constexpr std::size_t kGuard = 64;

/// Memory on the case's device with guard regions: `guard` bytes of kGuardByte before and after
/// the payload, checked after the run (DESIGN.md §4 "guard regions around every buffer stay
/// intact"). Inputs the library only reads get no guard, so that their last element ends the
/// allocation (a read past it faults under compute-sanitizer / ASan).
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(device_, o.device_);
    std::swap(host_, o.host_);
    std::swap(dev_ptr_, o.dev_ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(guard_, o.guard_);
    return *this;
  }
  ~Buffer() {
    if (dev_ptr_) cuda::device_free(dev_ptr_);
  }

  /// Allocate and fill with `payload` (whose size is the payload size), guards around it.
  static Result<Buffer> create(Device device, const std::vector<std::uint8_t>& payload,
                               std::size_t guard) {
    Buffer b;
    b.device_ = device;
    b.bytes_ = payload.size();
    b.guard_ = guard;
    // Built in place: caches of large blocks reach hundreds of MB, and every extra copy shows
    // in the CPU suite's run time.
    std::vector<std::uint8_t> full(payload.size() + 2 * guard, kGuardByte);
    if (!payload.empty()) std::memcpy(full.data() + guard, payload.data(), payload.size());
    if (device.type == DeviceType::kCPU) {
      b.host_ = std::move(full);
      return b;
    }
    // At least one byte, so that an empty tensor still has a distinct non-null address.
    auto mem = cuda::device_malloc(std::max<std::size_t>(full.size(), 1), device.index);
    if (!mem.ok()) return mem.status();
    b.dev_ptr_ = *mem;
    PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_device(b.dev_ptr_, full.data(), full.size()));
    return b;
  }

  void* data() {
    std::uint8_t* base =
        device_.type == DeviceType::kCPU ? host_.data() : static_cast<std::uint8_t*>(dev_ptr_);
    return base + guard_;
  }

  /// Overwrite the payload (same size) with `payload`; guards stay as they are.
  Status upload(const std::vector<std::uint8_t>& payload) {
    if (payload.size() != bytes_) return Status(StatusCode::kInternal, "Buffer::upload: size");
    if (bytes_ == 0) return Status::Ok();
    if (device_.type == DeviceType::kCPU) {
      std::memcpy(host_.data() + guard_, payload.data(), bytes_);
      return Status::Ok();
    }
    return cuda::copy_to_device(static_cast<std::uint8_t*>(dev_ptr_) + guard_, payload.data(),
                                bytes_);
  }

  /// Copy the payload back to the host.
  Status download(std::vector<std::uint8_t>* payload) {
    payload->resize(bytes_);
    if (bytes_ == 0) return Status::Ok();
    if (device_.type == DeviceType::kCPU) {
      std::memcpy(payload->data(), host_.data() + guard_, bytes_);
      return Status::Ok();
    }
    return cuda::copy_to_host(payload->data(), static_cast<std::uint8_t*>(dev_ptr_) + guard_,
                              bytes_);
  }

  /// Empty string if both guard regions are intact, else where the first damage is.
  Result<std::string> damaged_guard(const char* name) {
    std::vector<std::uint8_t> before(guard_), after(guard_);
    if (guard_ > 0) {
      if (device_.type == DeviceType::kCPU) {
        std::memcpy(before.data(), host_.data(), guard_);
        std::memcpy(after.data(), host_.data() + guard_ + bytes_, guard_);
      } else {
        auto* base = static_cast<std::uint8_t*>(dev_ptr_);
        PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_host(before.data(), base, guard_));
        PAGEDATTN_RETURN_IF_ERROR(cuda::copy_to_host(after.data(), base + guard_ + bytes_, guard_));
      }
    }
    for (std::size_t i = 0; i < guard_; ++i) {
      if (before[i] != kGuardByte)
        return fmt::format("{}: guard byte {} before the buffer was overwritten", name, guard_ - i);
      if (after[i] != kGuardByte)
        return fmt::format("{}: guard byte {} past the end of the buffer was overwritten", name, i);
    }
    return std::string();
  }

 private:
  Device device_{};
  std::vector<std::uint8_t> host_;
  void* dev_ptr_ = nullptr;
  std::size_t bytes_ = 0;
  std::size_t guard_ = 0;
};

}  // namespace pagedattn::testing::detail
