// The exchange buffer of decode context parallelism and the two steps around the local
// attention: "prepare" (the lengths the local run plans with, and the true ones for the peers)
// and the W-way log-sum-exp merge. CPU loops in decode.cpp, CUDA kernels in cp_kernels.cu.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pagedattn/attention.h"
#include "pagedattn/status.h"
#include "pagedattn/tensor.h"

namespace pagedattn::dist::detail {

/// One rank's slot of the all-gather buffer: out `[S, H, D]` (query dtype, dense), then lse
/// `[S, H]` fp32, then the rank's true local lengths `[S]` int32 (0 = empty shard), each
/// part starting at a multiple of kSlotAlign bytes.
inline constexpr std::size_t kSlotAlign = 256;
inline std::size_t align_up(std::size_t n) { return (n + kSlotAlign - 1) / kSlotAlign * kSlotAlign; }

struct SlotLayout {
  std::int64_t num_seqs = 0, num_heads = 0, head_size = 0;
  DType dtype = DType::kFloat16;
  int world = 1;
  std::size_t lse_offset = 0, lens_offset = 0, slot_bytes = 0;

  static SlotLayout make(std::int64_t s, std::int64_t h, std::int64_t d, DType dtype, int world) {
    SlotLayout l;
    l.num_seqs = s;
    l.num_heads = h;
    l.head_size = d;
    l.dtype = dtype;
    l.world = world;
    const std::size_t out_bytes = static_cast<std::size_t>(s * h * d) * dtype_size(dtype);
    l.lse_offset = align_up(out_bytes);
    l.lens_offset = l.lse_offset + align_up(static_cast<std::size_t>(s * h) * 4);
    l.slot_bytes = l.lens_offset + align_up(static_cast<std::size_t>(s) * 4);
    return l;
  }
};

/// `adjusted[s] = max(seq_lens[s], 1)` (an empty shard is planned and run as one key, whose
/// result the merge ignores) and `lens[s] = seq_lens[s]` (the slot's copy for the peers).
Status cuda_prepare(const TensorView& seq_lens, std::int32_t* adjusted, std::int32_t* lens,
                    Stream stream);
/// out / lse (strided, optional lse) from `world` slots starting at `gathered`; `sinks`
/// optional `[H]` fp32 joins as one more state (lse = sink, out = 0).
Status cuda_merge(const unsigned char* gathered, const SlotLayout& layout, const TensorView& sinks,
                  const TensorView& out, const TensorView& lse, Stream stream);

/// The CUDA steps of the thread communicator on one GPU (communicator.cpp, which stays free
/// of CUDA headers): a valid device index (kDeviceUnavailable otherwise), an asynchronous
/// device-to-device copy on `stream` and a host wait for `stream` (kInternal when CUDA fails).
Status cuda_check_device(int device);
Status cuda_copy_async(void* dst, const void* src, std::size_t bytes, int device, Stream stream);
Status cuda_stream_wait(int device, Stream stream);

}  // namespace pagedattn::dist::detail
