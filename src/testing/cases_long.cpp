// Million-token cases of the correctness matrix (DESIGN.md §4, "Tolerance and length"): rows
// that attend 2^20 keys, in fp32, fp16 and bf16, as decode rows and as a prefill chunk at the
// end of the context, on every backend; on the GPU also with the KV splits forced to one or
// two, so that one CTA walks the whole (or half the) context with its fp32 running state.
// Sized for CI (one KV head, one to four query heads, head 32 or 64: at most 1.6 GB of host
// memory and a few seconds per case on one core, mostly the oracle and the input generation).
#include <cstdint>
#include <vector>

#include "src/testing/harness.h"

namespace pagedattn::testing {

namespace {

constexpr int kMillion = 1 << 20;
/// Query rows of the prefill chunk (one query head): each (row, head) costs the oracle a pass
/// over 2^20 keys, about a second at head 64. A row's accumulation chain does not depend on
/// how many rows share its CTA, so a short chunk shows what a long one would.
constexpr int kPrefillRows = 8;

CaseConfig long_case(Device device, KVLayout layout, int head_size, int heads, DType dtype,
                     int query_len, int splits, std::uint64_t seed) {
  CaseConfig c;
  c.device = device;
  c.layout = layout;
  c.block_size = 16;
  c.head_size = head_size;
  c.num_heads = heads;
  c.num_kv_heads = 1;
  c.dtype = dtype;
  c.kv_dtype = dtype;
  c.seq_lens = {kMillion};
  c.query_lens = {query_len};
  c.plan.num_splits = splits;
  c.tag = query_len == 1 ? "len1m" : "len1mprefill";
  c.name = case_name(c);
  c.seed = seed;  // fixed per case, so that adding a case changes no other case's inputs
  return c;
}

}  // namespace

void add_long_context_cases(Device device, bool quick, std::vector<CaseConfig>* out) {
  // Minutes under compute-sanitizer: the quick subset stays small.
  if (quick) return;
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  const KVLayout nhd = KVLayout::kNHD, hnd = KVLayout::kHND;
  // Decode rows (CUDA: the tiled kernel for fp32, the decode fast path for fp16 / bf16 head
  // 64) and prefill chunks (CUDA: the tiled kernel for fp32, the tensor-core prefill kernel,
  // which never splits the keys, for fp16 / bf16 head 64).
  out->push_back(long_case(device, nhd, 32, 2, f32, 1, 0, 0x1A0001));
  out->push_back(long_case(device, nhd, 64, 4, f16, 1, 0, 0x1A0002));
  out->push_back(long_case(device, hnd, 64, 2, b16, 1, 0, 0x1A0003));
  out->push_back(long_case(device, nhd, 32, 1, f32, kPrefillRows, 0, 0x1A0004));
  out->push_back(long_case(device, nhd, 64, 1, f16, kPrefillRows, 0, 0x1A0005));
  out->push_back(long_case(device, hnd, 64, 1, b16, kPrefillRows, 0, 0x1A0006));
  if (device.type != DeviceType::kCUDA) return;  // the CPU backend never splits
  // Few splits: one CTA (or two) carries an fp32 running max / sum / accumulator over 2^20
  // (2^19) keys, the shape where a per-key running sum loses its small weights.
  out->push_back(long_case(device, nhd, 32, 2, f32, 1, 1, 0x1A0101));
  out->push_back(long_case(device, nhd, 64, 4, f16, 1, 1, 0x1A0102));
  out->push_back(long_case(device, hnd, 64, 2, b16, 1, 2, 0x1A0103));
  out->push_back(long_case(device, nhd, 32, 1, f32, kPrefillRows, 1, 0x1A0104));
  // The configuration of the report in issue 26 (fp32, 4 query heads, head 64: 3.2 GB of
  // host memory), planned and in one split.
  out->push_back(long_case(device, nhd, 64, 4, f32, 1, 0, 0x1A0105));
  out->push_back(long_case(device, nhd, 64, 4, f32, 1, 1, 0x1A0106));
}

}  // namespace pagedattn::testing
