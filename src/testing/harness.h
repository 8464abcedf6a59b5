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
  std::string name;                  // empty = case_name(*this)
};

/// Readable unique name: "<layout>_bs<B>_h<D>_q<H>kv<KVH>_<dtype>[_<kvdtype>][_window<W>]
/// [_softcap<C>][_alibi][_sinks][_pad<P>]_<lengths-tag>".
std::string case_name(const CaseConfig& config);

/// Comparison budget: |out - ref| <= atol + rtol * |ref| (DESIGN.md §4). One table.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
};
Tolerance tolerance_for(DType dtype, DType kv_dtype);

struct CaseResult {
  Status status;              // non-ok: the case could not run (invalid config, no device)
  bool pass = false;          // status ok and every element within tolerance, no NaN
  double max_abs_error = 0;   // over out (and lse)
  double worst_ratio = 0;     // max |out-ref| / (atol + rtol*|ref|); pass needs <= 1
  std::int64_t elements_checked = 0;
  std::string detail;         // first failing element, for messages
  KernelChoice choice;        // what ran
};

/// Build, run and compare one case on config.device.
CaseResult run_case(const CaseConfig& config);

/// The CPU/GPU correctness matrix: pairwise coverage of every axis value (DESIGN.md §4) plus
/// named cases for each fault class of DESIGN.md §5. `quick` = a smaller set (for the
/// compute-sanitizer subset) that still touches every kernel instantiation and boundary class.
std::vector<CaseConfig> matrix_cases(Device device, bool quick = false);

/// Cases whose name matches a glob ('*' and '?'); "all" = every case.
std::vector<CaseConfig> select_cases(const std::vector<CaseConfig>& cases,
                                     const std::string& glob);

}  // namespace pagedattn::testing
