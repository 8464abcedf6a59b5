// Alignment rules of the MMA kernels' 16-byte cp.async copies (decode fast path, prefill):
// host-only, header-only, so that selection and the unit tests see them in every build.
#pragma once

#include <cstdint>

#include "pagedattn/attention.h"

namespace pagedattn::cuda {

/// True when every stride but the innermost of the query, output, key cache and value cache is
/// a multiple of 8 elements (16 bytes of a 16-bit dtype), dimensions of extent 1 excepted.
inline bool mma_copy_aligned_strides(const AttentionArgs& args) {
  const TensorView* views[] = {&args.query, &args.out, &args.cache.key, &args.cache.value};
  for (const TensorView* v : views)
    for (int d = 0; d + 1 < v->ndim; ++d)
      if (v->shape[d] > 1 && v->strides[d] % 8 != 0) return false;
  return true;
}

/// True when the query, output, key and value base pointers are 16-byte aligned.
inline bool mma_copy_aligned_pointers(const AttentionArgs& args) {
  for (const void* p : {args.query.data, args.out.data, args.cache.key.data, args.cache.value.data})
    if ((reinterpret_cast<std::uintptr_t>(p) & 15u) != 0) return false;
  return true;
}

}  // namespace pagedattn::cuda
