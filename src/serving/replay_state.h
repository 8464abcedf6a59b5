// The replay's state and its helpers (internal to src/serving): the Replay class that
// replay.cpp (set-up, steps, report) and replay_verify.cpp (the per-step row checks and the
// finish-time cache check) implement together.
#pragma once

#include "src/serving/replay.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <numeric>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#if defined(__unix__)
#include <unistd.h>
#endif

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/cuda/backend/cuda_backend.h"
#include "src/serving/serving_util.h"
#include "src/serving/step_buffer.h"
#include "src/testing/fill.h"
#include "src/testing/harness.h"

namespace pagedattn::serving::replay_internal {


using detail::DeviceMemory;
using detail::in_step;
using detail::internal;
using detail::invalid;
using detail::kMaxInt32;
using detail::StepBuffer;
using testing::fill_pattern;
using testing::kGolden;
using testing::mix64;
using testing::poison_element;
using testing::SplitMix64;

// Q/K/V values are a pure function of (seed, stream, request, position, element): the K/V a
// request writes for a position are the same whichever step writes them, and the finish-time
// cache check can regenerate them.
enum class Stream : std::uint64_t { kQuery = 1, kKey = 2, kValue = 3 };

inline std::uint64_t row_key(std::uint64_t seed, Stream stream, std::int64_t request, std::int64_t pos) {
  std::uint64_t h = mix64(seed ^ (static_cast<std::uint64_t>(stream) * kGolden));
  h = mix64(h ^ (static_cast<std::uint64_t>(request) * 0xD6E8FEB86659FD93ull));
  return mix64(h ^ static_cast<std::uint64_t>(pos));
}

// K/V of a prompt token inside the trace's shared prefix (pos < spec.prefix_tokens) are a
// function of the prefix chain entry and the position, not of the request: requests with
// equal hash_ids hold equal K/V there, which is what makes sharing their blocks valid and
// lets the finish check compare a shared block with what this request would have written.
// The chain entries do not depend on whether sharing is on, so a run with sharing and one
// without compute the same attention.
inline std::uint64_t kv_row_key(std::uint64_t seed, Stream stream, const RequestSpec& spec,
                         std::int64_t request, std::int64_t pos) {
  if (pos >= spec.prefix_tokens) return row_key(seed, stream, request, pos);
  std::uint64_t h = mix64(seed ^ (static_cast<std::uint64_t>(stream) * kGolden) ^
                          0x50FF1C5ull);
  h = mix64(h ^ spec.chain_at(pos));
  return mix64(h ^ static_cast<std::uint64_t>(pos));
}

// fill_pattern over gigabytes (a soak's pool): the pattern once, then doubling copies.
inline void fill_fast(unsigned char* dst, std::size_t bytes, const std::vector<std::uint8_t>& element) {
  const std::size_t seed = std::min<std::size_t>(bytes, 4096 * element.size());
  fill_pattern(dst, seed, element);
  for (std::size_t done = seed; done < bytes;) {
    const std::size_t n = std::min(done, bytes - done);
    std::memcpy(dst + done, dst, n);
    done += n;
  }
}

// Run fn(begin, end) over [0, n) split into `workers` contiguous parts, on threads.
template <class Fn>
void parallel_for(std::int64_t n, std::int64_t workers, const Fn& fn) {
  workers = std::max<std::int64_t>(1, std::min(workers, n));
  if (workers == 1) {
    if (n > 0) fn(std::int64_t{0}, n);
    return;
  }
  std::vector<std::thread> pool;
  for (std::int64_t w = 1; w < workers; ++w) {
    const std::int64_t b = n * w / workers, e = n * (w + 1) / workers;
    try {
      pool.emplace_back([&fn, b, e] { fn(b, e); });
    } catch (const std::system_error&) {
      fn(b, e);  // no thread to spare: do it here
    }
  }
  fn(std::int64_t{0}, n / workers);
  for (std::thread& t : pool) t.join();
}

// Uniform in [-1, 1) on a grid of 2^-23: exactly representable in fp32.
inline float element_value(std::uint64_t key, std::int64_t index) {
  const std::uint64_t v = mix64(key + static_cast<std::uint64_t>(index + 1) * kGolden);
  return static_cast<float>(static_cast<std::int64_t>(v >> 40)) * 0x1p-23f - 1.0f;
}

// Write `n` values of row `key` into `base` (dtype) from element `offset`, rounded to dtype.
inline void fill_row(void* base, DType dtype, std::int64_t offset, std::uint64_t key, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    numeric::store_from_float(base, dtype, offset + i, element_value(key, i));
  }
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Element offset of (block, offset in block, kv head, dim) in a cache tensor of `layout`,
// from the tensor's own strides (so padded pages are addressed as the kernels must).
inline std::int64_t cache_offset(const TensorView& t, KVLayout layout, bool is_key, std::int32_t x,
                          std::int64_t block, std::int64_t offset, std::int64_t head,
                          std::int64_t dim) {
  switch (layout) {
    case KVLayout::kNHD:
      return block * t.stride(0) + offset * t.stride(1) + head * t.stride(2) + dim * t.stride(3);
    case KVLayout::kHND:
      return block * t.stride(0) + head * t.stride(1) + offset * t.stride(2) + dim * t.stride(3);
    case KVLayout::kSplit:
      if (is_key) {
        return block * t.stride(0) + head * t.stride(1) + (dim / x) * t.stride(2) +
               offset * t.stride(3) + (dim % x) * t.stride(4);
      }
      return block * t.stride(0) + head * t.stride(1) + dim * t.stride(2) + offset * t.stride(3);
  }
  return 0;
}

// The replay of one configuration: owns the cache, the per-step tensors and the statistics.
class Replay {
 public:
  Replay(const ReplayConfig& config, const Trace& trace, const ProgressFn& progress)
      : config_(config), trace_(trace), progress_(progress) {}

  Result<ReplayReport> run();

 private:
  Status setup();
  Result<RequestSpec> make_spec(std::int64_t index);
  // The prompt and output lengths a record replays with (clipped to --max-prompt /
  // --max-output, raised to 1).
  std::pair<std::int64_t, std::int64_t> replayed_lengths(const TraceRecord& rec) const;
  // Adds (sign 1) or removes (-1) one request's clipping counts and trace totals.
  void count_spec(const TraceRecord& rec, int sign);
  // Takes the `dropped` waiting requests of a soak's deadline out of those counts.
  void uncount_dropped(std::int64_t dropped);
  Status copy_on_write(const BlockCopy& copy);
  void take_sample();
  // The counters a progress callback sees now (sample = false).
  ReplayProgress progress_now() const;
  void finish_report();
  std::int64_t replay_device_bytes() const;
  Status run_step(const StepBatch& batch);
  Status verify_rows(const StepBatch& batch);
  Status check_request_cache(const ScheduledSeq& seq, std::int64_t step);
  Status mirror_blocks(const std::vector<std::int32_t>& blocks, std::int64_t num_tokens);
  Status poison_blocks(const std::vector<std::int32_t>& blocks);
  Status corrupt_cache(std::int64_t slot);
  void record_failure(std::string what);

  const ReplayConfig& config_;
  const Trace& trace_;
  const ProgressFn& progress_;
  std::chrono::steady_clock::time_point t0_;
  ReplayReport report_;

  // Geometry.
  bool on_cuda_ = false;
  Device device_{};
  int num_heads_ = 0;
  int num_kv_heads_ = 0;
  int head_size_ = 0;
  int block_size_ = 0;
  DType dtype_ = DType::kBFloat16;
  DType cache_dtype_ = DType::kBFloat16;
  std::int32_t x_ = 0;
  float scale_ = 0;
  testing::Tolerance tol_;

  // Requests and the serving state.
  std::vector<RequestSpec> specs_;
  std::optional<BlockAllocator> allocator_;
  std::optional<Scheduler> scheduler_;

  // The cache: host_cache_ views host memory (the cache itself on the CPU, a mirror refreshed
  // block by block on CUDA); cache_ views the memory attention reads.
  std::vector<unsigned char> host_k_, host_v_;
  DeviceMemory dev_k_, dev_v_, dev_poison_;
  // Pages in dev_poison_: the longest run of adjacent freed blocks one copy refills (4 MiB of
  // a Llama-1B bf16 page size).
  static constexpr std::int64_t kPoisonPages = 256;
  std::int64_t poison_pages_ = 1;
  DeviceMemory dev_staging_;                 // mirror_blocks' gathered pages
  std::vector<unsigned char> host_staging_;
  KVCache cache_;
  KVCache host_cache_;
  std::vector<unsigned char> nan_;  // one NaN element of the cache dtype

  // Per-step tensors.
  StepBuffer query_, key_, value_, out_, lse_, slots_, block_table_, seq_lens_, qsl_;
  std::vector<unsigned char> cpu_workspace_;
  DeviceMemory dev_workspace_;
  std::int64_t table_width_ = 0;
  std::uint64_t sample_rng_seed_ = 0;

  // Host mirror blocks older than the device's (CUDA: written since they were last copied).
  std::vector<std::uint8_t> host_stale_;
  // Soak state.
  std::int64_t max_model_len_ = 0;
  std::int64_t next_request_ = 0;       // index of the next request make_spec builds
  std::int64_t tokens_done_ = 0;
  double next_sample_s_ = 0;
  bool sharing_ = false;
  // Injected faults: the step's output fault (its failures are the injection's), and the
  // corrupted cache slots -> injection index, until their block is freed.
  bool periodic_faults_ = false;
  bool output_fault_now_ = false;
  std::int64_t output_fault_index_ = -1;
  std::unordered_map<std::int64_t, std::int64_t> corrupted_slots_;
  std::vector<std::uint8_t> fault_detected_;
};

}  // namespace pagedattn::serving::replay_internal
