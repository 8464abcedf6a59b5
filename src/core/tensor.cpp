#include "pagedattn/tensor.h"

#include <dlpack/dlpack.h>

#include <cstdint>
#include <limits>
#include <sstream>

namespace pagedattn {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kFloat16: return 2;
    case DType::kBFloat16: return 2;
    case DType::kFloat8E4M3: return 1;
    case DType::kFloat8E5M2: return 1;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat16: return "fp16";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat8E4M3: return "fp8_e4m3";
    case DType::kFloat8E5M2: return "fp8_e5m2";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
  }
  return "unknown";
}

Result<DType> parse_dtype(const std::string& name) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                  DType::kFloat8E5M2, DType::kInt32, DType::kInt64}) {
    if (name == to_string(d)) return d;
  }
  return Status(StatusCode::kInvalidArgument,
                "dtype '" + name + "': expected one of fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, "
                "int32, int64");
}

bool is_fp8(DType dtype) { return dtype == DType::kFloat8E4M3 || dtype == DType::kFloat8E5M2; }

std::string to_string(const Device& device) {
  if (device.type == DeviceType::kCPU) return "cpu";
  return "cuda:" + std::to_string(device.index);
}

namespace {
TensorView make_view(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                     Device device) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.device = device;
  v.ndim = static_cast<int>(shape.size() > kMaxDims ? kMaxDims : shape.size());
  int i = 0;
  for (std::int64_t s : shape) {
    if (i >= kMaxDims) break;
    v.shape[i++] = s;
  }
  return v;
}
}  // namespace

TensorView TensorView::contiguous(void* data, DType dtype,
                                  std::initializer_list<std::int64_t> shape, Device device) {
  TensorView v = make_view(data, dtype, shape, device);
  std::int64_t stride = 1;
  for (int d = v.ndim - 1; d >= 0; --d) {
    v.strides[d] = stride;
    stride *= v.shape[d];
  }
  return v;
}

TensorView TensorView::strided(void* data, DType dtype, std::initializer_list<std::int64_t> shape,
                               std::initializer_list<std::int64_t> strides, Device device) {
  TensorView v = make_view(data, dtype, shape, device);
  int i = 0;
  for (std::int64_t s : strides) {
    if (i >= kMaxDims) break;
    v.strides[i++] = s;
  }
  return v;
}

namespace {
/// Dimensions a view's arrays really hold: a hand-built view may carry any `ndim`, and no
/// member may read past shape[kMaxDims - 1] because of it.
int held_dims(int ndim) { return ndim < 0 ? 0 : (ndim > kMaxDims ? kMaxDims : ndim); }
}  // namespace

// An empty tensor may carry sizes whose product overflows (from_dlpack accepts it: it has no
// elements), and a hand-built view anything at all: products and sums saturate at INT64_MAX
// instead of overflowing (undefined behaviour), so that every size check against them fails.
std::int64_t TensorView::numel() const {
  if (ndim <= 0 || ndim > kMaxDims) return 0;
  for (int d = 0; d < ndim; ++d)
    if (shape[d] == 0) return 0;
  std::int64_t n = 1;
  for (int d = 0; d < ndim; ++d)
    if (__builtin_mul_overflow(n, shape[d], &n)) return std::numeric_limits<std::int64_t>::max();
  return n;
}

bool TensorView::is_contiguous() const {
  std::int64_t expected = 1;
  for (int d = held_dims(ndim) - 1; d >= 0; --d) {
    if (shape[d] != 1 && strides[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return false;
  }
  return true;
}

std::int64_t TensorView::span() const {
  if (numel() == 0) return 0;
  std::int64_t last = 0;
  for (int d = 0; d < held_dims(ndim); ++d) {
    std::int64_t reach = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) ||
        __builtin_add_overflow(last, reach, &last) || last == std::numeric_limits<std::int64_t>::max())
      return std::numeric_limits<std::int64_t>::max();
  }
  return last + 1;
}

std::string TensorView::describe() const {
  std::ostringstream os;
  if (ndim < 0 || ndim > kMaxDims) {
    os << "(ndim " << ndim << ", outside 0.." << kMaxDims << ") " << to_string(dtype) << " "
       << to_string(device);
    return os.str();
  }
  os << "[";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << shape[d];
  os << "] " << to_string(dtype) << " strides [";
  for (int d = 0; d < ndim; ++d) os << (d ? ", " : "") << strides[d];
  os << "] " << to_string(device);
  return os.str();
}

Result<TensorView> from_dlpack(const DLTensor& t) {
  auto invalid = [](const std::string& m) { return Status(StatusCode::kInvalidArgument, m); };
  // ndim 0 (a scalar) is rejected rather than mapped to an "absent" view, which would
  // silently switch an optional feature (sinks, ALiBi) off.
  if (t.ndim < 1 || t.ndim > kMaxDims)
    return invalid("DLTensor.ndim = " + std::to_string(t.ndim) + ": expected 1.." +
                   std::to_string(kMaxDims));
  if (t.dtype.lanes != 1)
    return invalid("DLTensor.dtype.lanes = " + std::to_string(t.dtype.lanes) + ": expected 1");
  if (t.shape == nullptr)
    return invalid("DLTensor.shape is null with ndim = " + std::to_string(t.ndim));
  TensorView v;
  const int code = t.dtype.code;
  const int bits = t.dtype.bits;
  if (code == kDLFloat && bits == 32) v.dtype = DType::kFloat32;
  else if (code == kDLFloat && bits == 16) v.dtype = DType::kFloat16;
  else if (code == kDLBfloat && bits == 16) v.dtype = DType::kBFloat16;
  else if (code == kDLFloat8_e4m3fn && bits == 8) v.dtype = DType::kFloat8E4M3;
  else if (code == kDLFloat8_e5m2 && bits == 8) v.dtype = DType::kFloat8E5M2;
  else if (code == kDLInt && bits == 32) v.dtype = DType::kInt32;
  else if (code == kDLInt && bits == 64) v.dtype = DType::kInt64;
  else
    return Status(StatusCode::kUnsupported, "DLTensor dtype code " + std::to_string(code) +
                                                " bits " + std::to_string(bits) +
                                                " has no pagedattn equivalent");
  if (t.device.device_type == kDLCPU || t.device.device_type == kDLCUDAHost) {
    v.device = Device::cpu();
  } else if (t.device.device_type == kDLCUDA || t.device.device_type == kDLCUDAManaged) {
    v.device = Device::cuda(t.device.device_id);
  } else {
    return Status(StatusCode::kUnsupported, "DLTensor device type " +
                                                std::to_string(t.device.device_type) +
                                                ": pagedattn supports CPU and CUDA");
  }
  v.ndim = t.ndim;
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  bool empty = false;
  for (int d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < 0)
      return invalid("DLTensor.shape[" + std::to_string(d) + "] = " + std::to_string(t.shape[d]) +
                     ": expected >= 0");
    empty |= t.shape[d] == 0;
  }
  // Products are checked before they are formed: a wrapped dense stride or element count would
  // describe another tensor (a stride of 0, a numel() of 0) instead of failing.
  std::int64_t dense = 1;     // product of the sizes after d (the dense stride of d)
  std::int64_t numel = 1;
  std::int64_t last = 0;      // largest element offset
  bool dense_overflow = false;
  for (int d = t.ndim - 1; d >= 0; --d) {
    const std::int64_t size = t.shape[d];
    v.shape[d] = size;
    if (t.strides) {
      v.strides[d] = t.strides[d];
    } else {
      // An empty tensor has no elements to address: its strides past an overflow are 0.
      v.strides[d] = dense_overflow ? 0 : dense;
      if (!dense_overflow && size > 1 && dense > kMax / size) dense_overflow = true;
      else if (!dense_overflow) dense *= size;
    }
    if (v.strides[d] < 0)
      return invalid("DLTensor.strides[" + std::to_string(d) + "] = " +
                     std::to_string(v.strides[d]) + ": negative strides are not supported");
    if (empty) continue;
    if (size > 1 && numel > kMax / size)
      return invalid("DLTensor shape: the element count overflows int64 (at shape[" +
                     std::to_string(d) + "] = " + std::to_string(size) + ")");
    numel *= size;
    if (size > 1 && v.strides[d] > 0 && (size - 1) > (kMax - last) / v.strides[d])
      return invalid("DLTensor.strides[" + std::to_string(d) + "] = " +
                     std::to_string(v.strides[d]) +
                     ": the largest element offset overflows int64");
    last += (size - 1) * v.strides[d];
  }
  // The address arithmetic in integers: an offset from a null pointer, or one that wraps the
  // address space, is undefined behaviour as pointer arithmetic.
  const auto base = reinterpret_cast<std::uintptr_t>(t.data);
  if (t.data == nullptr && t.byte_offset != 0)
    return invalid("DLTensor.data is null but byte_offset = " + std::to_string(t.byte_offset));
  if (t.byte_offset > std::numeric_limits<std::uintptr_t>::max() - base)
    return invalid("DLTensor.byte_offset = " + std::to_string(t.byte_offset) +
                   " wraps the address space");
  v.data = reinterpret_cast<void*>(base + static_cast<std::uintptr_t>(t.byte_offset));
  return v;
}

void to_dlpack(const TensorView& view, DLTensor* out) {
  out->data = view.data;
  out->byte_offset = 0;
  out->ndim = view.ndim;
  out->shape = const_cast<std::int64_t*>(view.shape);
  out->strides = const_cast<std::int64_t*>(view.strides);
  out->device.device_type = view.device.type == DeviceType::kCUDA ? kDLCUDA : kDLCPU;
  out->device.device_id = view.device.index;
  out->dtype.lanes = 1;
  out->dtype.bits = static_cast<std::uint8_t>(dtype_size(view.dtype) * 8);
  switch (view.dtype) {
    case DType::kFloat32:
    case DType::kFloat16: out->dtype.code = kDLFloat; break;
    case DType::kBFloat16: out->dtype.code = kDLBfloat; break;
    case DType::kFloat8E4M3: out->dtype.code = kDLFloat8_e4m3fn; break;
    case DType::kFloat8E5M2: out->dtype.code = kDLFloat8_e5m2; break;
    case DType::kInt32:
    case DType::kInt64: out->dtype.code = kDLInt; break;
  }
}

}  // namespace pagedattn
