// Helpers of the CUDA test suite: skip without a GPU, RAII device memory, and a small attention
// problem (host data + device copies) for the tests that need the raw output bits (graph
// replay, determinism) or special allocations, which the shared harness (run_case) does not
// expose.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/cuda/backend/cuda_backend.h"
#include "src/cuda/tiled/cuda_config.h"
#include "src/testing/harness.h"

namespace pagedattn::cudatest {

inline bool have_gpu() {
  static const bool yes = cuda::testsupport::device_count() > 0 &&
                          query_device(Device::cuda(0)).ok();
  return yes;
}

#define PA_SKIP_WITHOUT_GPU()                                            \
  do {                                                                   \
    if (!::pagedattn::cudatest::have_gpu()) GTEST_SKIP() << "no CUDA device present"; \
  } while (0)

#define PA_ASSERT_OK(expr)                             \
  do {                                                 \
    const ::pagedattn::Status pa_st_ = (expr);         \
    ASSERT_TRUE(pa_st_.ok()) << pa_st_.to_string();    \
  } while (0)

/// splitmix64: small, seedable, identical everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform(float lo, float hi) {
    return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }

 private:
  std::uint64_t s_;
};

/// Device memory owned by the test; freed after a device synchronisation-free cudaFree.
class DeviceMem {
 public:
  DeviceMem() = default;
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
  DeviceMem(DeviceMem&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceMem() {
    if (p_) cuda::device_free(p_);
  }
  /// On `device` (-1: the current device).
  Status alloc(std::size_t bytes, int device = -1) {
    auto m = cuda::device_malloc(bytes, device);
    if (!m.ok()) return m.status();
    p_ = *m;
    bytes_ = bytes;
    return Status::Ok();
  }
  Status upload(const void* host, std::size_t bytes, std::size_t offset = 0) {
    return cuda::copy_to_device(static_cast<unsigned char*>(p_) + offset, host, bytes);
  }
  template <class T>
  Status upload(const std::vector<T>& v) {
    return upload(v.data(), v.size() * sizeof(T));
  }
  Status download(void* host, std::size_t bytes, std::size_t offset = 0) const {
    return cuda::copy_to_host(host, static_cast<const unsigned char*>(p_) + offset, bytes);
  }
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b(bytes_);
    if (bytes_) (void)download(b.data(), bytes_);
    return b;
  }
  void* get() const { return p_; }
  unsigned char* at(std::size_t offset) const { return static_cast<unsigned char*>(p_) + offset; }
  std::size_t size() const { return bytes_; }

 private:
  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

/// A small attention problem with host data, an oracle result and device copies.
struct ProblemSpec {
  KVLayout layout = KVLayout::kNHD;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_size = 64;
  int block_size = 16;
  DType dtype = DType::kFloat16;
  DType kv_dtype = DType::kFloat16;
  std::vector<int> seq_lens{17};
  std::vector<int> query_lens{1};
  int sliding_window = 0;
  float softcap = 0.0f;
  bool alibi = false;
  bool sinks = false;
  bool lse = true;
  std::int64_t page_pad = 0;
  std::uint64_t seed = 7;
  float scale_boost = 6.0f;
  PlanOptions plan;
  /// Bytes between the start of the query's allocation and the query (not a multiple of 16:
  /// a base pointer the 16-byte fast paths must refuse at run time). Ignored with
  /// query_at_end.
  std::size_t query_offset_bytes = 0;
  /// >= 0: key dim 0 of token 5 of sequence 0 of this KV head is +inf (an overflowed key);
  /// check_against_oracle then skips the query heads of that KV head, whose outputs are NaN.
  int inf_key_kv_head = -1;
  /// The CUDA device that holds every tensor and the workspace; the calling thread's current
  /// device is left as it is (it may differ: the library must follow the tensors).
  int device = 0;
  /// fp8 caches, non-empty: device-resident dequantisation scales (KVCache::k_scales /
  /// v_scales) of 1 (per tensor) or num_kv_heads (per KV head) values, which replace the host
  /// scalars for the kernels; check_against_oracle then runs the oracle once per KV head with
  /// that head's values as the host scalars (the cache codes stay those the writer stored with
  /// the host scalars).
  std::vector<float> device_k_scales, device_v_scales;
  /// Each sequence's keys, values and query rows come from generators of their own (seeded by
  /// `seed` and the sequence's index), and the block table from another: sequence s then has
  /// the same data in any batch that has it at index s (batch-invariance tests).
  bool per_sequence_data = false;
};

class Problem {
 public:
  /// Build host data (cache written by the writer oracle, poison 0xFF = NaN elsewhere) and the
  /// device copies. `query_at_end`: place the query so that its last byte is the last byte of
  /// a 2 MiB-multiple allocation (a read past it leaves the allocation).
  static Result<std::unique_ptr<Problem>> make(const ProblemSpec& spec, bool query_at_end = false);

  /// Plan (kept) and allocate the workspace.
  Status plan();
  /// Plan from host seq_lens `planned` (one per sequence) while the device keeps the real
  /// ones: what a CUDA graph captured at one decode step sees when replayed at a later step.
  Status plan_for_lengths(const std::vector<std::int32_t>& planned);
  /// Plan from `host` (the metadata plan_attention validates) and allocate the workspace.
  Status plan_with(const HostMetadata& host);
  /// Run on `stream` (no synchronisation).
  Status run(void* stream = nullptr);
  /// Run with a workspace the caller provides instead of the one plan() allocated.
  Status run_with_workspace(void* workspace, std::size_t bytes, void* stream = nullptr);
  /// The one-call convenience path (paged_attention: its own plan and workspace, synchronises).
  Status run_convenience(void* stream = nullptr);
  /// Poison out and lse on the device (0xFF bytes = NaN).
  Status poison_outputs();
  /// Overwrite the device scales (same sizes as ProblemSpec::device_k_scales) without a new
  /// plan; check_against_oracle uses the new values.
  Status set_device_scales(const std::vector<float>& k, const std::vector<float>& v);
  std::vector<std::uint8_t> out_bytes() const;
  std::vector<std::uint8_t> lse_bytes() const;
  /// Compare the device output with the oracle under the harness tolerance; "" = pass.
  std::string check_against_oracle() const;

  const ProblemSpec& spec() const { return spec_; }
  const AttentionPlan& attention_plan() const { return plan_; }
  std::int64_t num_tokens() const { return num_tokens_; }

 private:
  ProblemSpec spec_;
  std::int64_t num_tokens_ = 0;
  // host
  std::vector<std::uint8_t> q_host_, kc_host_, vc_host_;
  std::vector<std::int32_t> block_table_, seq_lens_, starts_;
  std::vector<float> alibi_, sinks_;
  std::int64_t width_ = 0;
  KVCache host_cache_;
  // device
  DeviceMem q_mem_, out_mem_, lse_mem_, kc_mem_, vc_mem_, bt_mem_, sl_mem_, qsl_mem_, al_mem_,
      sk_mem_, ws_mem_, ksc_mem_, vsc_mem_;
  std::size_t q_offset_ = 0;
  AttentionArgs args_;
  HostMetadata host_;
  AttentionPlan plan_;
};

/// Run `pr` (planned) eagerly on a new stream, check it against the oracle, then capture one
/// run into a CUDA graph and replay it twice from poisoned outputs: every replay must give the
/// eager output and LSE bit for bit. Fatal failures return early (wrap the call in
/// ASSERT_NO_FATAL_FAILURE).
void expect_graph_replay_equals_eager(Problem& pr, int* programmatic_edges = nullptr);

/// Run `config` through the harness (testing::run_case) into `*result` and check what every
/// decode fast-path test asks: the call succeeded, compared elements, ran on the decode fast
/// path (KernelId::kCudaDecodeMMA) and matched the oracle (the message gives the splits, the
/// worst ratio and the plan's reason). Fatal failures return early (wrap the call in
/// ASSERT_NO_FATAL_FAILURE); the caller adds its own checks on `*result`.
void expect_on_decode_fast_path(const testing::CaseConfig& config, testing::CaseResult* result);

/// GoogleTest's name of a generated case: its case_name (every field) and its index, unique
/// even where two generated cases have the same fields.
std::string indexed_case_name(const ::testing::TestParamInfo<testing::CaseConfig>& info);

}  // namespace pagedattn::cudatest
