// Test cases as data (DESIGN.md §4), shared by GoogleTest and `pagedattn verify`: a case is a
// configuration with a readable name; run_case builds the inputs (fp32, rounded to the storage
// dtype), writes them into a NaN-poisoned cache through write_kv on the case's device, runs
// plan/run, runs the oracle on the same rounded inputs and compares with the tolerance table.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pagedattn/pagedattn.h"

namespace pagedattn::testing {

/// How an fp8 case hands its scales to the library (CaseConfig::scales).
enum class ScaleMode : std::uint8_t {
  /// KVCache::k_scale / v_scale (host scalars).
  kHost,
  /// KVCache::k_scales / v_scales as `[1]` tensors on the case's device, holding the scalars.
  kTensor,
  /// `[num_kv_heads]` tensors on the case's device: KV head g's scale is the case's scale
  /// times 0.5 + 1.5 g / (num_kv_heads - 1) (1 for one KV head), so every head has its own.
  kPerHead,
};
/// "host", "tensor", "per-head".
const char* to_string(ScaleMode mode);

struct CaseConfig {
  Device device = Device::cpu();
  KVLayout layout = KVLayout::kNHD;
  int num_heads = 8;
  int num_kv_heads = 2;
  int head_size = 64;
  int block_size = 16;
  DType dtype = DType::kFloat16;     // query / output (and cache when kv_dtype == dtype)
  DType kv_dtype = DType::kFloat16;  // == dtype ("auto") or fp8_e4m3 / fp8_e5m2
  std::vector<int> seq_lens{17};
  std::vector<int> query_lens{1};    // same length as seq_lens; 0 = skipped sequence
  /// Non-empty: the plan is made from these host lengths (one per sequence, query_len <=
  /// planned <= seq_len) while the run's metadata holds seq_lens: a CUDA graph captured at one
  /// decode step and replayed after the sequences grew. The result must still be exact.
  std::vector<int> planned_seq_lens;
  int sliding_window = 0;
  float softcap = 0.0f;
  bool alibi = false;
  bool sinks = false;
  bool lse = true;                   // also request and check the LSE output
  std::int64_t page_pad = 0;
  std::uint64_t seed = 1;
  int extra_blocks = 3;              // physical pool larger than needed; random permutation
  PlanOptions plan;                  // tile / split overrides
  float k_scale = 1.0f;              // fp8 only; 0 = derived from the data
  float v_scale = 1.0f;
  ScaleMode scales = ScaleMode::kHost;  // fp8 only: scalars or device tensors
  std::string name;                  // empty = case_name(*this)
  /// Last component of case_name() (a lengths profile such as "decode", or a fault class such
  /// as "zeroq"); empty = derived from the lengths ("s3_max544_t7").
  std::string tag;
  /// Softmax scale; 0 = kDefaultScaleBoost * default_scale(head_size). The boost makes the
  /// softmax peaked: with inputs uniform in [-1, 1] and the model scale the logits have a
  /// standard deviation of 1/3, the weights are nearly uniform and a missing or extra key
  /// (window off by one, unmasked tail) moves the output by less than the fp16 budget.
  float scale = 0.0f;
  /// Elements between consecutive tokens of query and out beyond num_heads * head_size
  /// (token-strided activations, as a fused QKV projection produces). 0 = dense.
  std::int64_t token_pad = 0;
  /// Elements between consecutive heads of query and out beyond head_size (head-strided
  /// activations). 0 = dense.
  std::int64_t head_pad = 0;
  /// >= 0: the value cache's page padding, when it differs from the key cache's `page_pad`
  /// (K and V with different block strides: a kernel that addresses V with K's strides, as
  /// vLLM's kernels do with `kv_block_stride = key_cache.stride(0)`, reads the wrong
  /// elements). -1 = the same as page_pad.
  std::int64_t value_page_pad = -1;
  /// >= 0: elements between consecutive tokens of `out` beyond num_heads * (head_size +
  /// head_pad), when the output's token stride differs from the query's (a kernel that stores
  /// the output with the query's strides writes the wrong rows). -1 = the same as token_pad.
  std::int64_t out_token_pad = -1;
  /// `out` is exactly the query view (in-place attention, which AttentionArgs allows): every
  /// row must read its query before any output is stored over it.
  bool in_place = false;
  /// Metadata tensors with non-unit strides: block_table rows 3 entries (of -1) apart,
  /// seq_lens and query_start_loc every other int32 (the gaps hold INT32_MAX), slot_mapping
  /// every other element (the gaps hold slot 0). Readers must use the strides, never assume
  /// dense rows.
  bool strided_metadata = false;
  /// dtype of slot_mapping (int32 or int64; both are part of the API).
  DType slot_dtype = DType::kInt64;
  /// Fault class "an upstream NaN": one element of the query is NaN in the (token, head) rows
  /// with (7 token + head) % 5 == 0, so every score of those rows is NaN. Their output and
  /// LSE must be NaN, as the oracle's; every other row (the same GQA group included) must be
  /// exact.
  bool nan_query = false;
  /// Fault class "no finite logit": dim 0 of every key of KV head 0 is -inf and dim 0 of its
  /// query heads is 0.5, so every logit of those rows is -inf. The softmax is 0/0: output and
  /// LSE NaN, as the oracle's (with a sink: output 0 and LSE the sink; with a softcap the
  /// logits are finite). Every other KV head must be exact. Not for fp8 caches (e4m3 has no
  /// infinity).
  bool neg_inf_keys = false;
  /// Fault class "a sink of -inf" (attention.h: a sink is finite or -inf, -inf meaning no sink
  /// for that head): with `sinks`, the sinks of the even query heads are -inf and the others
  /// finite. A -inf sink must weigh nothing. A kernel that starts such a row's running sum at
  /// e^0 = 1 whatever the sink, and keeps it where no key of that state raises the maximum (a
  /// KV split without keys in the row's window, or keys whose logits are all -inf), gives that
  /// split the weight of a logit 0 in the merge (a diluted output) or, with neg_inf_keys,
  /// output 0 and LSE 0 instead of the oracle's NaN.
  bool neg_inf_sinks = false;
};

/// See CaseConfig::scale.
inline constexpr float kDefaultScaleBoost = 6.0f;

/// The softmax scale run_case uses for `config` (CaseConfig::scale resolved).
float case_scale(const CaseConfig& config);

/// Readable unique name: "<layout>_bs<B>_h<D>_q<H>kv<KVH>_<dtype>[_<kvdtype>][_window<W>]
/// [_softcap<C>][_alibi][_sinks][_pad<P>][_tile<T>][_splits<S>][_ks<K>_vs<V>][_tokpad<P>]
/// [_headpad<P>][_vpad<P>][_outpad<P>][_scaletensor|_scaleperhead][_invariant][_inplace][_stridedmeta][_i32slots][_nolse][_nanq][_ninfk][_ninfsink]_<lengths-tag>" (kvdtype "fp8e4m3" or
/// "fp8e5m2"; a '.' in a number is written 'p', so that every name is a valid GoogleTest
/// parameter name: letters, digits and '_' only).
std::string case_name(const CaseConfig& config);

/// Comparison budget: |out - ref| <= atol + rtol * |ref| (DESIGN.md §4). One table.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
/// Keys per row up to which the table's fp32 accumulation budget was measured (4097-key rows).
inline constexpr std::int64_t kToleranceRefKeys = 4096;
/// The share of every dtype's atol that is fp32 accumulation error at kToleranceRefKeys keys.
inline constexpr double kFp32AccumulationAtol = 1e-5;
/// Budget for `dtype` outputs (and their fp32 LSE) of rows that attend at most `keys_per_row`
/// keys: the table value up to kToleranceRefKeys, beyond it atol grows by
/// kFp32AccumulationAtol * (sqrt(keys_per_row / kToleranceRefKeys) - 1) (DESIGN.md §4,
/// "Tolerance and length", for the derivation); rtol never grows. 0 or less = short rows.
Tolerance tolerance_for(DType dtype, DType kv_dtype, std::int64_t keys_per_row = 0);

/// Keys the longest query row of `config` attends: its sequence's length, or the window.
std::int64_t longest_row_keys(const CaseConfig& config);

/// The cache a case allocates: its layout, block size, heads, head size, cache dtype and page
/// padding, with `num_blocks` physical blocks.
KVCacheSpec kv_cache_spec(const CaseConfig& config, std::int64_t num_blocks);

struct CaseResult {
  Status status;              // non-ok: the case could not run (invalid config, no device)
  bool pass = false;          // status ok and every element within tolerance; NaN only where
                              // the oracle has NaN (CaseConfig::nan_query)
  double max_abs_error = 0;   // over out (and lse)
  double worst_ratio = 0;     // max |out-ref| / (atol + rtol*|ref|); pass needs <= 1
  std::int64_t elements_checked = 0;
  std::string detail;         // first failing element, for messages
  KernelChoice choice;        // what ran
  /// True when the cache that write_kv produced equals the writer oracle's bit for bit (over
  /// the whole allocation: written slots, canary-poisoned tails, unused blocks, page padding).
  bool writer_exact = false;
  /// Wall time of the library's attention run (plan excluded), milliseconds.
  double run_ms = 0;
};

/// Build, run and compare one case on config.device.
CaseResult run_case(const CaseConfig& config);

/// The CPU/GPU correctness matrix: pairwise coverage of every axis value (DESIGN.md §4) plus
/// named cases for each fault class of DESIGN.md §5. `quick` = a smaller set (for the
/// compute-sanitizer subset) that still touches every kernel instantiation and boundary class.
std::vector<CaseConfig> matrix_cases(Device device, bool quick = false);

/// The million-token cases matrix_cases ends with (src/testing/cases_long.cpp): decode rows
/// and a prefill chunk attending 2^20 keys, fp32 / fp16 / bf16, tags "len1m" and
/// "len1mprefill"; for a CUDA device also with forced one- and two-split plans. None in the
/// `quick` subset. Appended to `out`.
void add_long_context_cases(Device device, bool quick, std::vector<CaseConfig>* out);

/// Cases whose name matches `glob`: patterns ('*' and '?') separated by commas, each selecting
/// the cases it matches; the pattern "all" (alone or in the list) selects every case. The cases
/// keep their matrix order, each once. `unmatched` (optional) receives the patterns that match
/// no case, so that a caller can reject a typo in one pattern of a list.
std::vector<CaseConfig> select_cases(const std::vector<CaseConfig>& cases,
                                     const std::string& glob,
                                     std::vector<std::string>* unmatched = nullptr);

}  // namespace pagedattn::testing
