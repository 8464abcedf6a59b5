// Non-owning tensor view, shaped like DLPack's DLTensor (data, dtype, device, shape, strides
// in elements) so that a framework tensor maps onto it one-to-one and back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include <dlpack/dlpack.h>  // DLPack >= 1.0 (vendored in third_party/, installed beside us)

#include "pagedattn/status.h"

namespace pagedattn {

/// Element types. fp8 formats are the OCP ones: e4m3 ("e4m3fn": no infinities, max 448,
/// NaN = 0x7F/0xFF) and e5m2 (IEEE-like, max 57344).
enum class DType : std::uint8_t {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat8E4M3,
  kFloat8E5M2,
  kInt32,
  kInt64,
};

/// Bytes per element (4, 2, 2, 1, 1, 4, 8).
std::size_t dtype_size(DType dtype);
/// Flag spelling of DESIGN.md §7: "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int32", "int64".
const char* to_string(DType dtype);
/// Inverse of to_string(DType). Error kInvalidArgument for any other string.
Result<DType> parse_dtype(const std::string& name);
/// True for fp8_e4m3 and fp8_e5m2.
bool is_fp8(DType dtype);

enum class DeviceType : std::uint8_t { kCPU, kCUDA };

/// Where a tensor's memory lives. `index` is the CUDA ordinal (ignored for the CPU).
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  static Device cpu() { return {DeviceType::kCPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::kCUDA, index}; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};
/// "cpu" or "cuda:N".
std::string to_string(const Device& device);

/// Most dimensions any pagedattn tensor has (the `split` key cache has 5).
inline constexpr int kMaxDims = 6;

/// A view of memory the caller owns. Shapes and strides are in elements (not bytes), as in
/// DLPack. A view with `ndim == 0` is "absent" (used for optional arguments such as the
/// log-sum-exp output, ALiBi slopes and sinks). `data` may be null while planning, when only
/// shapes and dtypes matter.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  Device device{};
  int ndim = 0;
  std::int64_t shape[kMaxDims] = {};
  std::int64_t strides[kMaxDims] = {};

  /// A dense row-major view of `shape`.
  static TensorView contiguous(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               Device device = Device::cpu());
  /// A view with explicit strides (elements). `shape` and `strides` must have equal length.
  static TensorView strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                            std::initializer_list<std::int64_t> strides,
                            Device device = Device::cpu());

  bool defined() const { return ndim > 0; }
  std::int64_t size(int dim) const { return shape[dim]; }
  std::int64_t stride(int dim) const { return strides[dim]; }
  /// Product of the shape (1 for ndim == 0 is not used: absent views have numel 0); 0 when any
  /// size is 0, INT64_MAX when the product overflows.
  std::int64_t numel() const;
  /// Row-major dense (strides of size-1 dimensions are ignored).
  bool is_contiguous() const;
  /// Largest element offset any index reaches, plus one (0 if numel() == 0): the number of
  /// elements the memory behind `data` must hold. Strides must be non-negative. INT64_MAX when
  /// the offset overflows.
  std::int64_t span() const;
  /// "[2, 3, 4] bf16 strides [12, 4, 1] cpu" for messages.
  std::string describe() const;
};

/// View a DLPack tensor. Strides may be null (dense). `byte_offset` is applied to `data`.
/// Errors: kInvalidArgument for ndim outside 1..kMaxDims (scalars are not tensors here),
/// lanes != 1, negative sizes or negative strides, a null `data` with a non-zero
/// `byte_offset`, a `byte_offset` that wraps the address space, an element count or a largest
/// element offset that overflows int64 (an empty tensor, with a size 0, is accepted whatever its other
/// sizes);
/// kUnsupported for dtypes and devices pagedattn has no use for.
Result<TensorView> from_dlpack(const DLTensor& tensor);

/// Fill `out` so that it describes `view`; `out.shape` and `out.strides` point into `view`,
/// which must outlive `out`. Always succeeds for views built by this library.
void to_dlpack(const TensorView& view, DLTensor* out);

}  // namespace pagedattn
