// How the decode fast path cuts one sequence's keys into splits: host and device code (a
// plain header), so that the kernels and the CPU unit tests run the same arithmetic.
#pragma once

#include <cstdint>

#include "src/cuda/common/fast_div.h"  // PA_HOST_DEVICE

namespace pagedattn::cuda {

/// Window start of a decode sequence with `len` keys (0 without a window).
PA_HOST_DEVICE inline int decode_window_start(int len, int window) {
  return window > 0 && len > window ? len - window : 0;
}

/// Splits of a decode sequence with `len` keys: the range [lo, len) (lo = the sliding-window
/// start) is cut at lo rounded down to a multiple of 64, then every `chunk` tokens (a multiple
/// of 64), into at most `max_splits` splits; the last split takes whatever remains. The plan
/// sizes `max_splits` and the workspace for its longest sequence; a longer one (a CUDA graph
/// replayed at a later step) is still covered exactly, with the remainder on its last split,
/// and never addresses a partial result past `max_splits`. 0 when len <= 0.
PA_HOST_DEVICE inline int decode_num_splits(int len, int window, int chunk, int max_splits) {
  if (len <= 0) return 0;
  const int lo_al = decode_window_start(len, window) & ~63;
  // Unsigned 32-bit: len - lo_al + chunk - 1 < 2^32 for any int len and chunk.
  const unsigned n = (static_cast<unsigned>(len - lo_al) + static_cast<unsigned>(chunk - 1)) /
                     static_cast<unsigned>(chunk);
  return n < static_cast<unsigned>(max_splits) ? static_cast<int>(n) : max_splits;
}

/// Split `split` of that cut: the tile start `start` (a multiple of 64) and the keys
/// [valid_lo, end) it attends; `nsplit` = decode_num_splits. False when the split has no keys
/// (split >= nsplit).
PA_HOST_DEVICE inline bool decode_split_range(int len, int window, int chunk, int max_splits,
                                              int split, int* start, int* valid_lo, int* end,
                                              int* nsplit) {
  *nsplit = decode_num_splits(len, window, chunk, max_splits);
  if (split >= *nsplit) return false;
  const int lo = decode_window_start(len, window);
  *start = (lo & ~63) + split * chunk;
  *end = split == *nsplit - 1 || len - *start <= chunk ? len : *start + chunk;
  *valid_lo = *start > lo ? *start : lo;
  return *valid_lo < *end;
}

}  // namespace pagedattn::cuda
