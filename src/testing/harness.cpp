// run_case and the tolerance table (DESIGN.md §4): build one case's inputs, write them through
// write_kv into a NaN-poisoned cache on the case's device, run plan/run, and compare with the
// oracle (reference_write_kv + reference_attention) on the same rounded/quantised inputs.
#include "src/testing/harness.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <utility>
#include <new>
#include <vector>

#include <unistd.h>

#include "src/core/numeric.h"
#include "src/cuda/backend/cuda_backend.h"
#include "src/testing/fill.h"
#include "src/testing/guarded_buffer.h"

namespace pagedattn::testing {

float case_scale(const CaseConfig& config) {
  if (config.scale != 0.0f) return config.scale;
  return kDefaultScaleBoost * default_scale(config.head_size);
}

// ------------------------------------------------------------------------ tolerances
KVCacheSpec kv_cache_spec(const CaseConfig& c, std::int64_t num_blocks) {
  KVCacheSpec spec;
  spec.layout = c.layout;
  spec.num_blocks = num_blocks;
  spec.block_size = c.block_size;
  spec.num_kv_heads = c.num_kv_heads;
  spec.head_size = c.head_size;
  spec.dtype = c.kv_dtype;
  spec.page_pad = c.page_pad;
  return spec;
}

Tolerance tolerance_for(DType dtype, DType kv_dtype, std::int64_t keys_per_row) {
  // The oracle runs on the same rounded (and, for fp8, the same dequantised) inputs, so the
  // budget covers only the kernel's arithmetic and the final rounding of `out` to `dtype`;
  // an fp8 cache therefore does not widen it (`kv_dtype` is accepted so that the table stays
  // the one place to change if a backend ever needs it).
  (void)kv_dtype;
  Tolerance t;
  switch (dtype) {
    case DType::kFloat32:
      // fp32 accumulation over a few thousand keys with a peaked softmax: the error of
      // sum(p_j v_j) in online-softmax order is ~sqrt(n) ulp of the largest term, a few 1e-7
      // for n = 4097, well inside 1e-5. Measured over the matrix: worst |diff| / budget 0.09 on
      // the CPU backend and 0.11 on the CUDA one (H200), so 1e-5 keeps a 9x margin there.
      t = {1e-5, 1e-5};
      break;
    case DType::kFloat16:
      // Output rounding alone is half an ulp: 2^-11 relative (4.9e-4).
      t = {1e-3, 1e-3};
      break;
    case DType::kBFloat16:
      // Output rounding alone is 2^-8 relative (3.9e-3).
      t = {8e-3, 8e-3};
      break;
    default:
      return {0, 0};
  }
  // Longer rows (DESIGN.md §4, "Tolerance and length"): every backend accumulates the softmax
  // sums in fp32 whatever the dtype, and the rounding error of an n-term fp32 sum grows as
  // sqrt(n) (mean-zero, independent roundings: Higham & Mary, SIAM J. Sci. Comput. 41(5),
  // 2019). So the fp32 accumulation share of atol (1e-5 at kToleranceRefKeys keys, the
  // measured point above) grows by sqrt(n / kToleranceRefKeys) - 1; rtol (output rounding,
  // the relative error of scale * q.k) does not depend on n. Errors that grow faster than
  // sqrt(n) (a running sum whose addends sink to a few ulps of it: one fp32 sum over 1M
  // weights lost 1.3e-3 of its value) are kernel defects this budget is meant to catch.
  if (keys_per_row > kToleranceRefKeys) {
    const double growth =
        std::sqrt(static_cast<double>(keys_per_row) / static_cast<double>(kToleranceRefKeys));
    t.atol += kFp32AccumulationAtol * (growth - 1.0);
  }
  return t;
}

std::int64_t longest_row_keys(const CaseConfig& c) {
  std::int64_t longest = 0;
  for (std::size_t s = 0; s < c.seq_lens.size() && s < c.query_lens.size(); ++s) {
    if (c.query_lens[s] <= 0) continue;
    // The last row of a sequence sees the most keys: all of them, or its window.
    const std::int64_t keys = c.sliding_window > 0
                                  ? std::min<std::int64_t>(c.seq_lens[s], c.sliding_window)
                                  : c.seq_lens[s];
    longest = std::max(longest, keys);
  }
  return longest;
}

namespace {

// ------------------------------------------------------------------------ helpers
/// The case's generator: its seed names the same inputs on every platform (fill.h).
SplitMix64 case_rng(std::uint64_t seed) {
  return SplitMix64(seed * kGolden + 0x632BE59BD9B4E019ull);
}

using detail::Buffer;
using detail::kGuard;

template <class T>
std::vector<std::uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<std::uint8_t> b(v.size() * sizeof(T));
  if (!b.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Status invalid_config(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, "case config: " + message);
}

/// Checks the harness itself needs before it can build inputs; everything else (window < 0,
/// unsupported head sizes, ...) is left to the library, whose status the case then reports.
Status check_config(const CaseConfig& c) {
  if (c.seq_lens.empty()) return invalid_config("seq_lens is empty");
  if (c.seq_lens.size() != c.query_lens.size())
    return invalid_config(
        fmt::format("{} seq_lens but {} query_lens", c.seq_lens.size(), c.query_lens.size()));
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
    if (c.seq_lens[i] < 0 || c.query_lens[i] < 0)
      return invalid_config(fmt::format("sequence {}: negative length", i));
    if (c.query_lens[i] > c.seq_lens[i])
      return invalid_config(
          fmt::format("sequence {}: query_len {} > seq_len {}", i, c.query_lens[i], c.seq_lens[i]));
  }
  if (!c.planned_seq_lens.empty()) {
    if (c.planned_seq_lens.size() != c.seq_lens.size())
      return invalid_config(fmt::format("{} planned_seq_lens but {} seq_lens",
                                        c.planned_seq_lens.size(), c.seq_lens.size()));
    for (std::size_t i = 0; i < c.seq_lens.size(); ++i)
      if (c.planned_seq_lens[i] < c.query_lens[i] || c.planned_seq_lens[i] > c.seq_lens[i])
        return invalid_config(fmt::format("sequence {}: planned length {} outside [{}, {}]", i,
                                          c.planned_seq_lens[i], c.query_lens[i], c.seq_lens[i]));
  }
  if (c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_size <= 0 || c.block_size <= 0)
    return invalid_config("num_heads, num_kv_heads, head_size and block_size must be > 0");
  if (c.num_heads % c.num_kv_heads != 0)
    return invalid_config(fmt::format("num_heads {} is not a multiple of num_kv_heads {}",
                                      c.num_heads, c.num_kv_heads));
  if (c.extra_blocks < 0) return invalid_config("extra_blocks < 0");
  if (c.token_pad < 0 || c.head_pad < 0) return invalid_config("token_pad or head_pad < 0");
  if (c.value_page_pad < -1 || c.out_token_pad < -1)
    return invalid_config("value_page_pad or out_token_pad < -1 (-1 = as the key / query)");
  if (c.in_place && c.out_token_pad >= 0 && c.out_token_pad != c.token_pad)
    return invalid_config("in_place needs out to be the query view (no out_token_pad)");
  if (c.dtype != DType::kFloat32 && c.dtype != DType::kFloat16 && c.dtype != DType::kBFloat16)
    return invalid_config(std::string("dtype ") + to_string(c.dtype) +
                          ": expected fp32, fp16 or bf16");
  if (c.kv_dtype != c.dtype && !is_fp8(c.kv_dtype))
    return invalid_config(std::string("kv_dtype ") + to_string(c.kv_dtype) +
                          ": expected the query dtype or an fp8 dtype");
  if (c.slot_dtype != DType::kInt32 && c.slot_dtype != DType::kInt64)
    return invalid_config("slot_dtype must be int32 or int64");
  return Status::Ok();
}

/// "(token 5 = seq 2 row 3 of 4, q_pos 40)" for messages.
struct RowLocator {
  std::vector<int> seq_of_token;
  std::vector<int> row_in_seq;
  const CaseConfig* config = nullptr;
  std::string where(std::int64_t token) const {
    const int s = seq_of_token[static_cast<std::size_t>(token)];
    const int row = row_in_seq[static_cast<std::size_t>(token)];
    const int qlen = config->query_lens[static_cast<std::size_t>(s)];
    const int slen = config->seq_lens[static_cast<std::size_t>(s)];
    return fmt::format("token {} = seq {} row {} of {}, q_pos {} of seq_len {}", token, s, row,
                       qlen, slen - qlen + row, slen);
  }
};

/// Element-wise |got - ref| <= atol + rtol * |ref|; records the worst ratio and the first
/// failure into `result`. NaN passes only where the reference is NaN (an input NaN the
/// oracle propagates, CaseConfig::nan_query); a NaN the reference lacks (a stray read of
/// poisoned memory) always fails, and so does a number where the reference is NaN.
class Comparator {
 public:
  Comparator(Tolerance tol, CaseResult* result) : tol_(tol), result_(result) {}
  /// `describe()` names the element; it is only called for the first failure.
  template <class Describe>
  void check(double got, double ref, Describe describe) {
    ++result_->elements_checked;
    if (std::isnan(ref)) {
      if (!std::isnan(got)) {
        ++failures_;
        result_->worst_ratio = std::numeric_limits<double>::infinity();
        if (first_.empty())
          first_ = fmt::format("{} = {:.8g}, reference NaN (an input NaN must reach it)",
                               describe(), got);
      }
      return;
    }
    const double err = std::fabs(got - ref);
    const double budget = tol_.atol + tol_.rtol * std::fabs(ref);
    const bool bad = !(err <= budget);  // NaN in either side fails
    const double ratio = std::isnan(err) ? std::numeric_limits<double>::infinity() : err / budget;
    if (std::isnan(err)) {
      result_->max_abs_error = std::numeric_limits<double>::infinity();
    } else {
      result_->max_abs_error = std::max(result_->max_abs_error, err);
    }
    result_->worst_ratio = std::max(result_->worst_ratio, ratio);
    if (bad) {
      ++failures_;
      if (first_.empty())
        first_ = fmt::format("{} = {:.8g}, reference {:.8g} (|diff| {:.3g} > budget {:.3g})",
                             describe(), got, ref, err, budget);
    }
  }
  std::int64_t failures() const { return failures_; }
  const std::string& first() const { return first_; }

 private:
  Tolerance tol_;
  CaseResult* result_;
  std::int64_t failures_ = 0;
  std::string first_;
};

/// First byte at which two equally long byte vectors differ, or -1.
std::int64_t first_difference(const std::vector<std::uint8_t>& a,
                              const std::vector<std::uint8_t>& b) {
  if (a.size() != b.size()) return 0;
  // memcmp's pointers must be valid even for length 0, and an empty vector's data() may be null.
  if (a.empty() || std::memcmp(a.data(), b.data(), a.size()) == 0) return -1;
  return std::mismatch(a.begin(), a.end(), b.begin()).first - a.begin();
}

/// Describes element `elem` of a cache tensor by its index along every dimension.
std::string cache_index(const TensorView& t, std::int64_t elem) {
  // Find the index by peeling strides largest first; padding elements fall outside every
  // index (then the remainder is reported).
  std::vector<int> order(static_cast<std::size_t>(t.ndim));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return t.strides[a] > t.strides[b]; });
  std::vector<std::int64_t> idx(static_cast<std::size_t>(t.ndim), 0);
  std::int64_t rest = elem;
  for (int d : order) {
    const std::int64_t i = std::min(rest / t.strides[d], t.shape[d] - 1);
    idx[static_cast<std::size_t>(d)] = i;
    rest -= i * t.strides[d];
  }
  std::string s = "[";
  for (int d = 0; d < t.ndim; ++d)
    s += (d ? ", " : "") + std::to_string(idx[static_cast<std::size_t>(d)]);
  s += "]";
  if (rest != 0) s += fmt::format(" + {} (page padding)", rest);
  return s;
}

}  // namespace

// ------------------------------------------------------------------------ run_case
namespace {

/// Host memory a case needs, roughly (bytes, as double so that absurd sizes cannot overflow):
/// the K/V pool (poisoned image, host copies, the oracle's copy), the generated K/V rows and
/// the query/output rows in fp32 with their rounded copies.
double estimated_host_bytes(const CaseConfig& c) {
  double kv_tokens = 0, q_tokens = 0, blocks = static_cast<double>(std::max(0, c.extra_blocks));
  for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
    kv_tokens += std::max(0, c.seq_lens[i]);
    blocks += std::ceil(std::max(0, c.seq_lens[i]) / static_cast<double>(std::max(1, c.block_size)));
    if (i < c.query_lens.size()) q_tokens += std::max(0, c.query_lens[i]);
  }
  const double block_elems =
      static_cast<double>(std::max(1, c.block_size)) * c.num_kv_heads * c.head_size +
      static_cast<double>(std::max<std::int64_t>({0, c.page_pad, c.value_page_pad}));
  const double cache = 2.0 * 3.0 * blocks * block_elems * static_cast<double>(dtype_size(c.kv_dtype));
  const double rows = 2.0 * kv_tokens * c.num_kv_heads * c.head_size * 4.0 * 2.0;
  const double q = 4.0 * q_tokens * c.num_heads * c.head_size * 4.0;
  return cache + rows + q;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

CaseResult run_case_checked(const CaseConfig& c);

}  // namespace

CaseResult run_case(const CaseConfig& c) {
  CaseResult r;
  r.status = check_config(c);
  if (!r.status.ok()) return r;
  // A case too large for this machine is an input error, reported before any allocation,
  // not a std::bad_alloc (or the OOM killer) half-way through.
  const double need = estimated_host_bytes(c), have = physical_memory_bytes();
  if (have > 0 && need > 0.6 * have) {
    r.status = invalid_config(fmt::format(
        "the case needs about {:.1f} GiB of host memory (cache pool, inputs and the oracle's "
        "copies); this machine has {:.1f} GiB: reduce --seq-lens, --num-heads, --head-size, "
        "--block-size or --page-pad", need / 1073741824.0, have / 1073741824.0));
    return r;
  }
  try {
    return run_case_checked(c);
  } catch (const std::bad_alloc&) {
    r.status = invalid_config(fmt::format("out of host memory building the case (about {:.1f} "
                                          "GiB estimated)", need / 1073741824.0));
    return r;
  }
}

namespace {

CaseResult run_case_checked(const CaseConfig& c) {
  CaseResult r;
  auto fail = [&r](Status st) {
    r.status = std::move(st);
    r.pass = false;
    return r;
  };

  SplitMix64 rng = case_rng(c.seed);
  const Device dev = c.device;
  const int num_seqs = static_cast<int>(c.seq_lens.size());
  const std::int64_t H = c.num_heads, KVH = c.num_kv_heads, D = c.head_size, BS = c.block_size;
  const bool fp8 = is_fp8(c.kv_dtype);

  // ---- physical blocks: a random permutation of a pool larger than needed ------------------
  std::vector<std::int64_t> blocks_of(static_cast<std::size_t>(num_seqs));
  std::int64_t needed = 0, max_blocks = 0;
  for (int s = 0; s < num_seqs; ++s) {
    blocks_of[static_cast<std::size_t>(s)] =
        (c.seq_lens[static_cast<std::size_t>(s)] + BS - 1) / BS;
    needed += blocks_of[static_cast<std::size_t>(s)];
    max_blocks = std::max(max_blocks, blocks_of[static_cast<std::size_t>(s)]);
  }
  const std::int64_t pool = std::max<std::int64_t>(1, needed + c.extra_blocks);
  std::vector<std::int32_t> perm(static_cast<std::size_t>(pool));
  std::iota(perm.begin(), perm.end(), 0);
  for (std::int64_t i = pool - 1; i > 0; --i)
    std::swap(perm[static_cast<std::size_t>(i)],
              perm[static_cast<std::size_t>(rng.below(static_cast<std::uint64_t>(i + 1)))]);
  // One column more than any sequence needs; entries past a sequence's blocks point at an
  // unused (NaN) block when there is one, so reading past ceil(seq_len / block_size) shows up
  // as NaN while the ids stay in range.
  const std::int64_t width = max_blocks + 1;
  const std::int64_t bt_stride = width + (c.strided_metadata ? 3 : 0);  // row stride
  const std::int32_t unused_block = perm[static_cast<std::size_t>(pool - 1)];
  std::vector<std::int32_t> block_table(static_cast<std::size_t>(num_seqs * bt_stride), -1);
  {
    std::int64_t next = 0;
    for (int s = 0; s < num_seqs; ++s)
      for (std::int64_t j = 0; j < width; ++j)
        block_table[static_cast<std::size_t>(s * bt_stride + j)] =
            j < blocks_of[static_cast<std::size_t>(s)] ? perm[static_cast<std::size_t>(next++)]
                                                       : unused_block;
  }

  // ---- new K/V rows: every token of every sequence (context and this step's tokens) ---------
  // All K/V reach the cache through write_kv. The rows come in a shuffled order, with a few
  // padding rows (slot -1, NaN data: skipping must not write them) and extra rows past
  // num_tokens (CUDA-graph padding: the token count comes from slot_mapping, never from key).
  struct Row {
    std::int64_t slot;
  };
  std::vector<Row> rows;
  for (int s = 0; s < num_seqs; ++s) {
    // With a sliding window, the blocks that lie wholly below the first query row's window are
    // never written: they keep the cache's NaN poison (DESIGN.md §2: blocks outside the window
    // are never read into a result), as after an engine has freed them or pointed them at a
    // null block. A kernel that reads such a block, even to weigh it 0, gives NaN.
    const int len = c.seq_lens[static_cast<std::size_t>(s)];
    const int qlen = c.query_lens[static_cast<std::size_t>(s)];
    const std::int64_t window_lo =
        c.sliding_window > 0 && qlen > 0
            ? std::max<std::int64_t>(0, std::int64_t{len} - qlen - c.sliding_window + 1)
            : 0;
    const std::int64_t first_written = window_lo / BS * BS;
    for (std::int64_t t = first_written; t < len; ++t) {
      rows.push_back({static_cast<std::int64_t>(
                          block_table[static_cast<std::size_t>(s * bt_stride + t / BS)]) *
                          BS +
                      t % BS});
    }
  }
  const int padding_rows = 2;
  for (int i = 0; i < padding_rows; ++i) rows.push_back({-1 - i});
  for (std::size_t i = rows.size(); i > 1; --i)
    std::swap(rows[i - 1], rows[static_cast<std::size_t>(rng.below(i))]);
  const std::int64_t n_rows = static_cast<std::int64_t>(rows.size());
  const std::int64_t extra_rows = 3;
  // K and V are strided views of one [rows, 2, KVH, D] buffer (a fused projection's output).
  const std::int64_t kv_row_stride = 2 * KVH * D;
  const std::int64_t kv_elems = (n_rows + extra_rows) * kv_row_stride;
  const std::size_t in_size = dtype_size(c.dtype);
  std::vector<std::uint8_t> kv_in = poisoned_bytes(c.dtype, kv_elems);
  float k_amax = 0, v_amax = 0;
  {
    std::vector<float> kv_f(static_cast<std::size_t>(n_rows * kv_row_stride));
    for (std::int64_t i = 0; i < n_rows; ++i) {
      if (rows[static_cast<std::size_t>(i)].slot < 0) continue;
      for (std::int64_t e = 0; e < kv_row_stride; ++e) {
        const float v = rng.uniform(-1.0f, 1.0f);
        kv_f[static_cast<std::size_t>(i * kv_row_stride + e)] = v;
        float& amax = e < KVH * D ? k_amax : v_amax;
        amax = std::max(amax, std::fabs(v));
      }
    }
    if (c.neg_inf_keys) {  // after the amax: the fp8 scales stay finite (not used with fp8)
      for (std::int64_t i = 0; i < n_rows; ++i)
        if (rows[static_cast<std::size_t>(i)].slot >= 0)
          kv_f[static_cast<std::size_t>(i * kv_row_stride)] = -INFINITY;  // K, head 0, dim 0
    }
    for (std::int64_t i = 0; i < n_rows; ++i) {
      if (rows[static_cast<std::size_t>(i)].slot < 0) continue;  // stays NaN
      for (std::int64_t e = 0; e < kv_row_stride; ++e)
        numeric::store_from_float(kv_in.data(), c.dtype, i * kv_row_stride + e,
                                  kv_f[static_cast<std::size_t>(i * kv_row_stride + e)]);
    }
  }
  // With strided metadata the slot mapping is every other element too; the gaps hold slot 0,
  // a valid slot, so a writer that ignores the stride writes the wrong slots (caught bitwise).
  const std::int64_t slot_stride = c.strided_metadata ? 2 : 1;
  std::vector<std::uint8_t> slots_bytes;
  if (c.slot_dtype == DType::kInt32) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(n_rows * slot_stride), 0);
    for (std::size_t i = 0; i < rows.size(); ++i)
      v[i * static_cast<std::size_t>(slot_stride)] = static_cast<std::int32_t>(rows[i].slot);
    slots_bytes = as_bytes(v);
  } else {
    std::vector<std::int64_t> v(static_cast<std::size_t>(n_rows * slot_stride), 0);
    for (std::size_t i = 0; i < rows.size(); ++i)
      v[i * static_cast<std::size_t>(slot_stride)] = rows[i].slot;
    slots_bytes = as_bytes(v);
  }
  // Scales: as configured, or derived from the data (vLLM's amax / 64) when 0.
  float k_scale = 1.0f, v_scale = 1.0f;
  if (fp8) {
    k_scale = c.k_scale != 0.0f ? c.k_scale : std::max(k_amax, 1e-6f) / 64.0f;
    v_scale = c.v_scale != 0.0f ? c.v_scale : std::max(v_amax, 1e-6f) / 64.0f;
  }

  // Per-KV-head scales (CaseConfig::scales): the device tensors hold these; the host scalars
  // stay those of the case (they must be ignored when the tensors are given).
  std::vector<float> k_head_scales, v_head_scales;
  if (fp8 && c.scales != ScaleMode::kHost) {
    const std::int64_t n = c.scales == ScaleMode::kPerHead ? KVH : 1;
    for (std::int64_t g = 0; g < n; ++g) {
      const float f = n > 1 ? 0.5f + 1.5f * static_cast<float>(g) / static_cast<float>(n - 1) : 1.0f;
      k_head_scales.push_back(k_scale * f);
      v_head_scales.push_back(v_scale * f);
    }
  }

  // ---- query (exactly sized: the last row ends the allocation) -----------------------------
  std::vector<int> starts(static_cast<std::size_t>(num_seqs) + 1, 0);
  for (int s = 0; s < num_seqs; ++s)
    starts[static_cast<std::size_t>(s) + 1] =
        starts[static_cast<std::size_t>(s)] + c.query_lens[static_cast<std::size_t>(s)];
  const std::int64_t T = starts.back();
  RowLocator loc;
  loc.config = &c;
  for (int s = 0; s < num_seqs; ++s)
    for (int i = 0; i < c.query_lens[static_cast<std::size_t>(s)]; ++i) {
      loc.seq_of_token.push_back(s);
      loc.row_in_seq.push_back(i);
    }
  const std::int64_t head_stride = D + c.head_pad;
  const std::int64_t tok_stride = H * head_stride + c.token_pad;
  // Exactly the span of the view: the last head of the last row ends the allocation.
  const std::int64_t act_elems = T > 0 ? (T - 1) * tok_stride + (H - 1) * head_stride + D : 0;
  std::vector<std::uint8_t> q_bytes = poisoned_bytes(c.dtype, act_elems);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d)
        numeric::store_from_float(q_bytes.data(), c.dtype, t * tok_stride + h * head_stride + d,
                                  rng.uniform(-1.0f, 1.0f));
  if (c.neg_inf_keys) {  // the query heads of KV head 0: dim 0 positive, so q.k = -inf
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H / KVH; ++h)
        numeric::store_from_float(q_bytes.data(), c.dtype, t * tok_stride + h * head_stride, 0.5f);
  }
  if (c.nan_query) {
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h)
        if ((7 * t + h) % 5 == 0)
          numeric::store_from_float(q_bytes.data(), c.dtype,
                                    t * tok_stride + h * head_stride + (t + 3 * h) % D, NAN);
  }
  // The output's own token stride (CaseConfig::out_token_pad), or the query view itself.
  const std::int64_t out_tok_stride =
      H * head_stride + (c.out_token_pad >= 0 ? c.out_token_pad : c.token_pad);
  const std::int64_t out_elems = T > 0 ? (T - 1) * out_tok_stride + (H - 1) * head_stride + D : 0;
  const std::vector<std::uint8_t> out_init = poisoned_bytes(c.dtype, out_elems);
  // lse rows are 2 floats apart beyond num_heads with strided metadata (strided output).
  const std::int64_t lse_stride = H + (c.strided_metadata ? 2 : 0);
  const std::int64_t lse_elems = T > 0 ? (T - 1) * lse_stride + H : 0;
  const std::vector<std::uint8_t> lse_init = poisoned_bytes(DType::kFloat32, lse_elems);

  std::vector<float> alibi(static_cast<std::size_t>(H)), sinks(static_cast<std::size_t>(H));
  for (std::int64_t h = 0; h < H; ++h) {
    // Bloom-style geometric slopes, jittered by the seed.
    alibi[static_cast<std::size_t>(h)] =
        std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(H)) *
        rng.uniform(0.5f, 1.5f);
    // Raw logits comparable with the (boosted) scaled scores, so that the sink matters.
    sinks[static_cast<std::size_t>(h)] = rng.uniform(-1.0f, 3.0f);
  }
  if (c.neg_inf_sinks)  // after the draws: the other inputs are those of the case without it
    for (std::int64_t h = 0; h < H; h += 2) sinks[static_cast<std::size_t>(h)] = -INFINITY;
  // seq_lens and query_start_loc, every other element when strided (gaps hold INT32_MAX).
  const std::int64_t ms = c.strided_metadata ? 2 : 1;
  std::vector<std::int32_t> seq_lens(static_cast<std::size_t>(num_seqs * ms), 0x7FFFFFFF);
  std::vector<std::int32_t> qsl(static_cast<std::size_t>((num_seqs + 1) * ms), 0x7FFFFFFF);
  for (int s = 0; s < num_seqs; ++s)
    seq_lens[static_cast<std::size_t>(s * ms)] = c.seq_lens[static_cast<std::size_t>(s)];
  for (int s = 0; s <= num_seqs; ++s)
    qsl[static_cast<std::size_t>(s * ms)] = starts[static_cast<std::size_t>(s)];

  // ---- caches, poisoned everywhere (tails, unused blocks, page padding) --------------------
  // The value cache may have its own page padding (CaseConfig::value_page_pad).
  const KVCacheSpec spec = kv_cache_spec(c, pool);
  KVCacheSpec vspec = spec;
  if (c.value_page_pad >= 0) vspec.page_pad = c.value_page_pad;
  auto cache_elems = kv_cache_elements(spec);
  if (!cache_elems.ok()) return fail(cache_elems.status());
  auto vcache_elems = kv_cache_elements(vspec);
  if (!vcache_elems.ok()) return fail(vcache_elems.status());
  const std::vector<std::uint8_t> cache_init = poisoned_bytes(c.kv_dtype, *cache_elems);
  const std::vector<std::uint8_t> vcache_init = poisoned_bytes(c.kv_dtype, *vcache_elems);

  // ---- device buffers ----------------------------------------------------------------------
  auto mk = [&](const std::vector<std::uint8_t>& payload, std::size_t guard) {
    return Buffer::create(dev, payload, guard);
  };
  auto b_kcache = mk(cache_init, kGuard);
  if (!b_kcache.ok()) return fail(b_kcache.status());
  auto b_vcache = mk(vcache_init, kGuard);
  if (!b_vcache.ok()) return fail(b_vcache.status());
  auto b_kv = mk(kv_in, 0);
  if (!b_kv.ok()) return fail(b_kv.status());
  auto b_slots = mk(slots_bytes, 0);
  if (!b_slots.ok()) return fail(b_slots.status());
  auto b_q = mk(q_bytes, 0);
  if (!b_q.ok()) return fail(b_q.status());
  auto b_out = mk(out_init, kGuard);
  if (!b_out.ok()) return fail(b_out.status());
  auto b_lse = mk(lse_init, kGuard);
  if (!b_lse.ok()) return fail(b_lse.status());
  auto b_bt = mk(as_bytes(block_table), 0);
  if (!b_bt.ok()) return fail(b_bt.status());
  auto b_sl = mk(as_bytes(seq_lens), 0);
  if (!b_sl.ok()) return fail(b_sl.status());
  auto b_qsl = mk(as_bytes(qsl), 0);
  if (!b_qsl.ok()) return fail(b_qsl.status());
  auto b_alibi = mk(as_bytes(alibi), 0);
  if (!b_alibi.ok()) return fail(b_alibi.status());
  auto b_sinks = mk(as_bytes(sinks), 0);
  if (!b_sinks.ok()) return fail(b_sinks.status());
  auto b_kscales = mk(as_bytes(k_head_scales.empty() ? std::vector<float>{1.0f} : k_head_scales), 0);
  if (!b_kscales.ok()) return fail(b_kscales.status());
  auto b_vscales = mk(as_bytes(v_head_scales.empty() ? std::vector<float>{1.0f} : v_head_scales), 0);
  if (!b_vscales.ok()) return fail(b_vscales.status());

  // K and V views from their own specs (make_kv_cache describes one spec; the value view of
  // the second call carries the value padding).
  auto make_cache = [&](void* kp, void* vp, Device d) -> Result<KVCache> {
    auto kc = make_kv_cache(spec, kp, kp, d, k_scale, v_scale);
    if (!kc.ok()) return kc.status();
    auto vc = make_kv_cache(vspec, vp, vp, d, k_scale, v_scale);
    if (!vc.ok()) return vc.status();
    KVCache both = *kc;
    both.value = vc->value;
    if (!k_head_scales.empty()) {
      // The device copies for the library's cache, the host vectors for the oracle's.
      const bool host = d != dev;
      const std::int64_t n = static_cast<std::int64_t>(k_head_scales.size());
      both.k_scales = TensorView::contiguous(host ? k_head_scales.data() : b_kscales->data(),
                                             DType::kFloat32, {n}, d);
      both.v_scales = TensorView::contiguous(host ? v_head_scales.data() : b_vscales->data(),
                                             DType::kFloat32, {n}, d);
    }
    return both;
  };
  auto cache = make_cache(b_kcache->data(), b_vcache->data(), dev);
  if (!cache.ok()) return fail(cache.status());
  const TensorView key_in = TensorView::strided(
      b_kv->data(), c.dtype, {n_rows + extra_rows, KVH, D}, {kv_row_stride, D, 1}, dev);
  const TensorView value_in = TensorView::strided(
      static_cast<std::uint8_t*>(b_kv->data()) + KVH * D * static_cast<std::int64_t>(in_size),
      c.dtype, {n_rows + extra_rows, KVH, D}, {kv_row_stride, D, 1}, dev);
  const TensorView slots =
      TensorView::strided(b_slots->data(), c.slot_dtype, {n_rows}, {slot_stride}, dev);

  // ---- write through the library -------------------------------------------------------------
  WriteKVOptions wopts;
  const TensorView host_slots =
      TensorView::strided(slots_bytes.data(), c.slot_dtype, {n_rows}, {slot_stride});
  if (dev.type != DeviceType::kCPU) wopts.host_slot_mapping = host_slots;
  {
    Status st = write_kv(key_in, value_in, slots, *cache, nullptr, wopts);
    if (!st.ok()) return fail(st);
  }

  // ---- the writer oracle, on host copies of the same poisoned memory -------------------------
  std::vector<std::uint8_t> ref_k = cache_init, ref_v = vcache_init;
  auto ref_cache = make_cache(ref_k.data(), ref_v.data(), Device::cpu());
  if (!ref_cache.ok()) return fail(ref_cache.status());
  {
    const TensorView hk = TensorView::strided(kv_in.data(), c.dtype, {n_rows + extra_rows, KVH, D},
                                              {kv_row_stride, D, 1});
    const TensorView hv =
        TensorView::strided(kv_in.data() + KVH * D * static_cast<std::int64_t>(in_size), c.dtype,
                            {n_rows + extra_rows, KVH, D}, {kv_row_stride, D, 1});
    Status st = reference_write_kv(hk, hv, host_slots, *ref_cache);
    if (!st.ok())
      return fail(Status(StatusCode::kInternal, "reference_write_kv: " + st.to_string()));
  }
  std::vector<std::string> problems;  // every independent failure, first one first
  {
    std::vector<std::uint8_t> got_k, got_v;
    Status st = b_kcache->download(&got_k);
    if (st.ok()) st = b_vcache->download(&got_v);
    if (!st.ok()) return fail(st);
    r.writer_exact = true;
    for (int which = 0; which < 2; ++which) {
      const auto& got = which ? got_v : got_k;
      const auto& want = which ? ref_v : ref_k;
      const std::int64_t at = first_difference(got, want);
      if (at < 0) continue;
      r.writer_exact = false;
      const std::size_t es = dtype_size(c.kv_dtype);
      const TensorView& tv = which ? cache->value : cache->key;
      const std::int64_t elem = at / static_cast<std::int64_t>(es);
      std::uint32_t g = 0, w = 0;
      std::memcpy(&g, &got[static_cast<std::size_t>(elem) * es], es);
      std::memcpy(&w, &want[static_cast<std::size_t>(elem) * es], es);
      problems.push_back(fmt::format(
          "write_kv: {} element {} {} is 0x{:0{}x}, the writer oracle has 0x{:0{}x}",
          which ? "value_cache" : "key_cache", elem, cache_index(tv, elem), g, 2 * es, w, 2 * es));
    }
  }

  // ---- attention through the library ---------------------------------------------------------
  AttentionArgs args;
  args.query =
      TensorView::strided(b_q->data(), c.dtype, {T, H, D}, {tok_stride, head_stride, 1}, dev);
  // In place: the output is the query view (its buffer, which has no guard regions).
  Buffer& out_buf = c.in_place ? b_q.value() : b_out.value();
  args.out = c.in_place ? args.query
                        : TensorView::strided(b_out->data(), c.dtype, {T, H, D},
                                              {out_tok_stride, head_stride, 1}, dev);
  if (c.lse)
    args.lse = TensorView::strided(b_lse->data(), DType::kFloat32, {T, H}, {lse_stride, 1}, dev);
  args.cache = *cache;
  args.block_table =
      TensorView::strided(b_bt->data(), DType::kInt32, {num_seqs, width}, {bt_stride, 1}, dev);
  args.seq_lens = TensorView::strided(b_sl->data(), DType::kInt32, {num_seqs}, {ms}, dev);
  args.query_start_loc =
      TensorView::strided(b_qsl->data(), DType::kInt32, {num_seqs + 1}, {ms}, dev);
  args.params.scale = case_scale(c);
  args.params.softcap = c.softcap;
  args.params.sliding_window = c.sliding_window;
  if (c.alibi)
    args.params.alibi_slopes = TensorView::contiguous(b_alibi->data(), DType::kFloat32, {H}, dev);
  if (c.sinks)
    args.params.sinks = TensorView::contiguous(b_sinks->data(), DType::kFloat32, {H}, dev);

  HostMetadata host;
  host.block_table =
      TensorView::strided(block_table.data(), DType::kInt32, {num_seqs, width}, {bt_stride, 1});
  host.seq_lens = TensorView::strided(seq_lens.data(), DType::kInt32, {num_seqs}, {ms});
  host.query_start_loc = TensorView::strided(qsl.data(), DType::kInt32, {num_seqs + 1}, {ms});

  // CaseConfig::planned_seq_lens: plan from shorter host lengths than the run's metadata
  // holds (the oracle below uses the real ones).
  HostMetadata plan_host = host;
  std::vector<std::int32_t> planned_lens;
  if (!c.planned_seq_lens.empty()) {
    planned_lens = seq_lens;
    for (std::int64_t s = 0; s < num_seqs; ++s)
      planned_lens[static_cast<std::size_t>(s * ms)] = c.planned_seq_lens[static_cast<std::size_t>(s)];
    plan_host.seq_lens = TensorView::strided(planned_lens.data(), DType::kInt32, {num_seqs}, {ms});
  }
  auto plan = plan_attention(args, plan_host, c.plan);
  if (!plan.ok()) return fail(plan.status());
  r.choice = plan->choice();
  std::vector<std::uint8_t> ws_init(plan->workspace_bytes(), 0x5A);
  auto b_ws = mk(ws_init, kGuard);
  if (!b_ws.ok()) return fail(b_ws.status());
  {
    const auto t0 = std::chrono::steady_clock::now();
    Status st = run_attention(*plan, args, plan->workspace_bytes() ? b_ws->data() : nullptr,
                              plan->workspace_bytes());
    if (st.ok() && dev.type == DeviceType::kCUDA) st = cuda::device_synchronize(dev.index);
    r.run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!st.ok()) return fail(st);
  }
  std::vector<std::uint8_t> out_bytes, lse_bytes;
  {
    Status st = out_buf.download(&out_bytes);
    if (st.ok()) st = b_lse->download(&lse_bytes);
    if (!st.ok()) return fail(st);
  }
  // DESIGN.md §3: the same plan and inputs give the same bits on every run (no atomics in
  // reductions, no races between threads). Run again into freshly poisoned outputs.
  {
    // In place, the first run overwrote the query: restore it.
    Status st = c.in_place ? b_q->upload(q_bytes) : b_out->upload(out_init);
    if (st.ok()) st = b_lse->upload(lse_init);
    if (st.ok())
      st = run_attention(*plan, args, plan->workspace_bytes() ? b_ws->data() : nullptr,
                         plan->workspace_bytes());
    if (st.ok() && dev.type == DeviceType::kCUDA) st = cuda::device_synchronize(dev.index);
    std::vector<std::uint8_t> out2, lse2;
    if (st.ok()) st = out_buf.download(&out2);
    if (st.ok()) st = b_lse->download(&lse2);
    if (!st.ok()) return fail(st);
    const std::int64_t at = first_difference(out2, out_bytes);
    if (at >= 0) {
      problems.push_back(fmt::format("nondeterministic: a second run with the same plan differs "
                                     "in out at byte {}",
                                     at));
    } else if (c.lse && first_difference(lse2, lse_bytes) >= 0) {
      problems.push_back("nondeterministic: a second run with the same plan differs in lse");
    }
  }
  {
    const std::pair<Buffer*, const char*> guarded[] = {{&b_kcache.value(), "key_cache"},
                                                       {&b_vcache.value(), "value_cache"},
                                                       {&b_out.value(), "out"},
                                                       {&b_lse.value(), "lse"},
                                                       {&b_ws.value(), "workspace"}};
    for (const auto& [buffer, name] : guarded) {
      auto dmg = buffer->damaged_guard(name);
      if (!dmg.ok()) return fail(dmg.status());
      if (!dmg->empty()) problems.push_back(*dmg);
    }
  }

  // ---- the oracle on the same rounded / quantised inputs -------------------------------------
  std::vector<float> ref_out(static_cast<std::size_t>(T * H * D), NAN);
  std::vector<float> ref_lse(static_cast<std::size_t>(T * H), NAN);
  {
    AttentionArgs ra;
    ra.query =
        TensorView::strided(q_bytes.data(), c.dtype, {T, H, D}, {tok_stride, head_stride, 1});
    ra.out = TensorView::contiguous(ref_out.data(), DType::kFloat32, {T, H, D});
    ra.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {T, H});
    ra.cache = *ref_cache;
    ra.block_table = host.block_table;
    ra.seq_lens = host.seq_lens;
    ra.query_start_loc = host.query_start_loc;
    ra.params = args.params;
    ra.params.alibi_slopes =
        c.alibi ? TensorView::contiguous(alibi.data(), DType::kFloat32, {H}) : TensorView{};
    ra.params.sinks =
        c.sinks ? TensorView::contiguous(sinks.data(), DType::kFloat32, {H}) : TensorView{};
    Status st = reference_attention(ra);
    if (!st.ok())
      return fail(Status(StatusCode::kInternal, "reference_attention: " + st.to_string()));
  }

  // ---- compare ---------------------------------------------------------------------------------
  const Tolerance tol = tolerance_for(c.dtype, c.kv_dtype, longest_row_keys(c));
  Comparator cmp(tol, &r);
  const TensorView& out = args.out;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t d = 0; d < D; ++d) {
        const double got =
            numeric::load_as_float(out_bytes.data(), c.dtype, t * out.strides[0] + h * head_stride + d);
        const double ref = ref_out[static_cast<std::size_t>((t * H + h) * D + d)];
        cmp.check(got, ref,
                  [&] { return fmt::format("out[{}, head {}, dim {}]", loc.where(t), h, d); });
      }
  if (c.lse) {
    const float* lse_got = reinterpret_cast<const float*>(lse_bytes.data());
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h)
        cmp.check(lse_got[t * lse_stride + h], ref_lse[static_cast<std::size_t>(t * H + h)],
                  [&] { return fmt::format("lse[{}, head {}]", loc.where(t), h); });
  }
  if (cmp.failures() > 0)
    problems.insert(
        problems.begin(),
        fmt::format("{} of {} elements outside the budget (atol {:g}, "
                    "rtol {:g}); first: {}",
                    cmp.failures(), r.elements_checked, tol.atol, tol.rtol, cmp.first()));
  // Elements of `out` outside every (token, head) row (token_pad, head_pad) belong to nobody:
  // they must keep their poison bit pattern.
  // In place, the padding of the query buffer keeps the query's poison.
  const std::vector<std::uint8_t>& out_before = c.in_place ? q_bytes : out_init;
  const std::int64_t out_span = c.in_place ? act_elems : out_elems;
  if (out.strides[0] > H * head_stride || c.head_pad > 0) {
    std::vector<char> owned(static_cast<std::size_t>(out_span), 0);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < H; ++h)
        std::fill_n(owned.begin() + static_cast<std::ptrdiff_t>(t * out.strides[0] + h * head_stride),
                    D, 1);
    const std::size_t es = in_size;
    for (std::int64_t e = 0; e < out_span; ++e) {
      if (owned[static_cast<std::size_t>(e)]) continue;
      if (std::memcmp(&out_bytes[static_cast<std::size_t>(e) * es],
                      &out_before[static_cast<std::size_t>(e) * es], es) != 0) {
        problems.push_back(
            fmt::format("out: padding element {} (between rows or heads) was overwritten", e));
        break;
      }
    }
  }
  if (lse_stride > H) {
    for (std::int64_t t = 0; t + 1 < T; ++t) {
      const std::size_t b0 = static_cast<std::size_t>(t * lse_stride + H) * 4;
      const std::size_t b1 = static_cast<std::size_t>((t + 1) * lse_stride) * 4;
      if (std::memcmp(&lse_bytes[b0], &lse_init[b0], b1 - b0) != 0) {
        problems.push_back(fmt::format("lse: padding after token {} was overwritten", t));
        break;
      }
    }
  }
  r.pass = problems.empty();
  for (std::size_t i = 0; i < problems.size(); ++i) r.detail += (i ? "; " : "") + problems[i];
  return r;
}

}  // namespace

}  // namespace pagedattn::testing
