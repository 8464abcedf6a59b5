// Glue between Python and the C++ API: framework arrays (anything nanobind imports: DLPack
// capsules, objects with __dlpack__, the buffer protocol) to TensorView through the library's
// own from_dlpack, and a failed Status to the Python exception its code stands for.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "pagedattn/pagedattn.h"

namespace pagedattn::python {

namespace nb = nanobind;

/// An input the library only reads (read-only numpy arrays are accepted).
using InArray = nb::ndarray<nb::ro>;
/// An output the library writes (read-only arrays are rejected by nanobind).
using OutArray = nb::ndarray<>;

/// A failed Status on its way to Python; translated by the exception translator that
/// module.cpp registers: kInvalidArgument -> ValueError, kUnsupported -> NotImplementedError,
/// kDeviceUnavailable and kInternal -> RuntimeError, each with the library's message.
/// Thrown with or without the GIL: translation runs after the call guard has re-acquired it.
struct StatusError {
  Status status;
};

inline void throw_if_error(const Status& st) {
  if (!st.ok()) throw StatusError{st};
}
template <class T>
T value_or_throw(Result<T> r) {
  if (!r.ok()) throw StatusError{r.status()};
  return std::move(r).value();
}

/// The library's view of an imported array, validated by pagedattn::from_dlpack (dtype,
/// device, strides). `name` prefixes the message of a failure ("query: DLTensor.ndim = 0 ...").
template <class Array>
TensorView to_view(const Array& a, const char* name) {
  DLTensor t{};
  t.data = const_cast<void*>(static_cast<const void*>(a.data()));
  t.device.device_type = static_cast<DLDeviceType>(a.device_type());
  t.device.device_id = a.device_id();
  t.ndim = static_cast<int32_t>(a.ndim());
  t.dtype.code = a.dtype().code;
  t.dtype.bits = a.dtype().bits;
  t.dtype.lanes = a.dtype().lanes;
  t.shape = const_cast<int64_t*>(a.shape_ptr());
  t.strides = const_cast<int64_t*>(a.stride_ptr());
  t.byte_offset = 0;  // already in data()
  Result<TensorView> v = from_dlpack(t);
  if (!v.ok()) throw StatusError{Status(v.status().code(), std::string(name) + ": " + v.status().message())};
  return *v;
}

/// An optional argument: None is the absent view.
template <class Array>
TensorView to_view(const std::optional<Array>& a, const char* name) {
  return a ? to_view(*a, name) : TensorView{};
}

}  // namespace pagedattn::python
