// Probe: the decode fast path for fp8 caches and head 256 (issue 21) against bf16 at the W1 shape (64 x
// 4096 tokens, 32/8 heads, block 16), timed exactly as `pagedattn bench` times W1 (median of
// CUDA-event times, the L2 flushed clean before each call) in one run with its read ceiling.
// Bytes count each configuration's own cache bytes (1 per fp8 element). Until `bench
// --config` covers dtypes this is how the numbers in docs/performance.md are taken:
//
//   cmake --build build --target pagedattn_decode_dtype_probe && build/pagedattn_decode_dtype_probe
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/runner.h"

using namespace pagedattn;
using namespace pagedattn::bench;

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
  auto ceiling = cuda::bench::read_ceiling_gbps(0, std::size_t{4} << 30, 20);
  if (!ceiling.ok()) {
    std::fprintf(stderr, "read ceiling: %s\n", ceiling.status().to_string().c_str());
    return 3;
  }
  std::printf("read ceiling %.0f GB/s\n", *ceiling);
  struct Cfg {
    const char* name;
    DType q, kv;
    KVLayout layout;
    int head, heads, kv_heads, batch, len;
  };
  const Cfg cfgs[] = {
      {"W1 bf16 nhd (baseline)", DType::kBFloat16, DType::kBFloat16, KVLayout::kNHD, 128, 32, 8, 64, 4096},
      {"W1 e4m3 nhd bf16-q", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kNHD, 128, 32, 8, 64, 4096},
      {"W1 e4m3 hnd bf16-q", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kHND, 128, 32, 8, 64, 4096},
      {"W1 e4m3 split bf16-q", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kSplit, 128, 32, 8, 64, 4096},
      {"W1 e5m2 nhd bf16-q", DType::kBFloat16, DType::kFloat8E5M2, KVLayout::kNHD, 128, 32, 8, 64, 4096},
      {"W1 e4m3 nhd f16-q", DType::kFloat16, DType::kFloat8E4M3, KVLayout::kNHD, 128, 32, 8, 64, 4096},
      {"W1-h64 bf16 nhd", DType::kBFloat16, DType::kBFloat16, KVLayout::kNHD, 64, 32, 8, 64, 4096},
      {"W1-h64 e4m3 nhd", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kNHD, 64, 32, 8, 64, 4096},
      {"W1-h64 e4m3 split", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kSplit, 64, 32, 8, 64, 4096},
      {"W1-h256 bf16 nhd", DType::kBFloat16, DType::kBFloat16, KVLayout::kNHD, 256, 32, 8, 64, 4096},
      {"W1-h256 bf16 split", DType::kBFloat16, DType::kBFloat16, KVLayout::kSplit, 256, 32, 8, 64, 4096},
      {"W1-h256 e4m3 nhd", DType::kBFloat16, DType::kFloat8E4M3, KVLayout::kNHD, 256, 32, 8, 64, 4096},
      {"W1 bf16 nhd (again)", DType::kBFloat16, DType::kBFloat16, KVLayout::kNHD, 128, 32, 8, 64, 4096},
  };
  cuda::bench::TimingOptions timing;
  timing.iters = iters;
  int failures = 0;
  for (const Cfg& c : cfgs) {
    Workload w;
    w.name = c.name;
    w.num_heads = c.heads;
    w.num_kv_heads = c.kv_heads;
    w.head_size = c.head;
    w.layout = c.layout;
    w.dtype = c.q;
    w.kv_dtype = c.kv;
    w.seq_lens.assign(static_cast<std::size_t>(c.batch), c.len);
    auto r = run_workload(w, 0, timing, *ceiling, 1);
    if (!r.ok()) {
      std::printf("%-26s FAILED %s\n", c.name, r.status().to_string().c_str());
      ++failures;
      continue;
    }
    std::printf("%-26s %8.1f us %6.0f GB/s %5.1f%%  %s splits %d\n", c.name, r->median_us, r->gbps,
                r->pct_of_ceiling, to_string(r->choice.kernel), r->choice.num_splits);
  }
  return failures ? 1 : 0;
}
