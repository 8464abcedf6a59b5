// libFuzzer target: from_dlpack on arbitrary DLTensor headers (any ndim, shapes, strides,
// dtype codes, devices, byte offsets; the data is never read). An accepted view must describe
// the header exactly, its numel() and span() must be the exact integers (checked in 128-bit
// arithmetic), and to_dlpack must give back a header that from_dlpack maps to the same view.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_bytes.h"
#include "pagedattn/tensor.h"

namespace pagedattn::fuzz {
namespace {

[[noreturn]] void fail(const std::string& what) { fuzz::fail("fuzz_dlpack", what); }

std::int64_t dim_value(ByteReader& in) {
  switch (in.pick(4)) {
    case 0: return static_cast<std::int64_t>(in.u64());
    case 1: return -static_cast<std::int64_t>(in.pick(3));
    default: return in.pick(9);
  }
}

bool same_view(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.dtype != b.dtype || a.device != b.device || a.ndim != b.ndim) return false;
  for (int d = 0; d < a.ndim; ++d)
    if (a.shape[d] != b.shape[d] || a.strides[d] != b.strides[d]) return false;
  return true;
}

void one_input(ByteReader& in) {
  static char memory[64];
  DLTensor t{};
  t.ndim = in.range(-1, 8);
  std::int64_t shape[8] = {}, strides[8] = {};
  for (int d = 0; d < 8; ++d) shape[d] = dim_value(in);
  const bool dense = in.flag();
  for (int d = 0; d < 8; ++d) strides[d] = dim_value(in);
  t.shape = shape;
  t.strides = dense ? nullptr : strides;
  t.data = in.flag() ? nullptr : memory;
  t.byte_offset = in.flag() ? in.u64() : in.pick(4) * 4;
  t.dtype.code = in.pick(4) == 0 ? in.u8() : in.pick(14);
  t.dtype.bits = in.pick(4) == 0 ? in.u8() : static_cast<std::uint8_t>(8 << in.pick(4));
  t.dtype.lanes = in.pick(8) == 0 ? in.u16() : 1;
  t.device.device_type = static_cast<DLDeviceType>(in.pick(4) == 0 ? in.u8() : (in.flag() ? 1 : 2));
  t.device.device_id = static_cast<std::int32_t>(in.pick(4) == 0 ? in.u32() : 0);
  if (t.ndim < 0) t.ndim = static_cast<std::int32_t>(in.u32());

  auto view = from_dlpack(t);
  if (!view.ok()) {
    if (view.status().code() != StatusCode::kInvalidArgument &&
        view.status().code() != StatusCode::kUnsupported)
      fail("from_dlpack: " + view.status().to_string());
    return;
  }
  const TensorView& v = *view;
  if (v.ndim != t.ndim) fail("ndim differs");
  __int128 numel = 1, span = 0;
  bool empty = false;
  for (int d = 0; d < v.ndim; ++d) {
    if (v.shape[d] != shape[d]) fail("shape differs");
    if (v.shape[d] < 0 || v.strides[d] < 0) fail("negative size or stride accepted");
    empty |= v.shape[d] == 0;
  }
  // An empty tensor is accepted whatever its other sizes (tensor.h); it has no elements.
  for (int d = 0; d < v.ndim && !empty; ++d) {
    numel *= v.shape[d];
    if (numel > INT64_MAX) fail("numel overflow accepted");
  }
  if (empty) numel = 0;
  if (!dense)
    for (int d = 0; d < v.ndim; ++d)
      if (v.shape[d] > 1 && v.strides[d] != strides[d]) fail("stride differs");
  if (!empty) {
    for (int d = 0; d < v.ndim; ++d) span += static_cast<__int128>(v.shape[d] - 1) * v.strides[d];
    span += 1;
    if (span > INT64_MAX) fail("span overflow accepted");
  }
  if (v.numel() != static_cast<std::int64_t>(numel)) fail("numel() is wrong");
  if (v.span() != static_cast<std::int64_t>(span)) fail("span() is wrong");
  DLTensor back{};
  to_dlpack(v, &back);
  auto again = from_dlpack(back);
  if (!again.ok()) fail("from_dlpack(to_dlpack(view)) fails: " + again.status().to_string());
  if (!same_view(*again, v)) fail("from_dlpack(to_dlpack(view)) differs from view");
}

}  // namespace
}  // namespace pagedattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pagedattn::fuzz::ByteReader in(data, size);
  pagedattn::fuzz::one_input(in);
  return 0;
}
