#include "bench/workloads.h"

#include <algorithm>

#include "src/serving/trace.h"

namespace pagedattn::bench {

std::uint64_t SplitMix64::next() {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::int64_t SplitMix64::uniform(std::int64_t lo, std::int64_t hi) {
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<std::int64_t>(next() % span);
}

namespace {
Workload base(const std::string& name, const std::string& desc, const std::string& group,
              KVLayout layout) {
  Workload w;
  w.name = name;
  w.description = desc;
  w.group = group;
  w.layout = layout;
  return w;
}
}  // namespace

std::vector<Workload> standard_workloads(KVLayout layout, std::uint64_t seed) {
  std::vector<Workload> out;
  {
    Workload w = base("W1", "32/8 heads, head 128, block 16, 64 x 4096", "standard", layout);
    w.seq_lens.assign(64, 4096);
    out.push_back(w);
  }
  {
    Workload w = base("W2", "32/8 heads, head 64, block 16, 128 x 2048", "standard", layout);
    w.head_size = 64;
    w.seq_lens.assign(128, 2048);
    out.push_back(w);
  }
  {
    Workload w = base("W3", "W1 shape, one sequence of 131072", "standard", layout);
    w.seq_lens.assign(1, 131072);
    out.push_back(w);
  }
  {
    Workload w = base("W4", "W1 shape, 256 seqs, lengths uniform 128..8192", "standard", layout);
    SplitMix64 rng{seed};
    for (int i = 0; i < 256; ++i) w.seq_lens.push_back(static_cast<int>(rng.uniform(128, 8192)));
    out.push_back(w);
  }
  {
    Workload w = base("W5", "W1 with block 2048 and padded pages (hybrid)", "standard", layout);
    w.block_size = 2048;
    // One page also carries 4096 elements of other state (a Mamba-style hybrid page), so the
    // block stride is larger than the block.
    w.page_pad = 4096;
    w.seq_lens.assign(64, 4096);
    out.push_back(w);
  }
  {
    Workload w = base("W6", "skewed: 1 x 32768 + 63 x 512", "standard", layout);
    w.seq_lens.assign(64, 512);
    w.seq_lens[0] = 32768;
    out.push_back(w);
  }
  {
    Workload w = base("W7", "one sequence of 1024 (latency)", "standard", layout);
    w.seq_lens.assign(1, 1024);
    w.graph = true;
    out.push_back(w);
  }
  return out;
}

Result<std::vector<Workload>> trace_workloads(KVLayout layout, std::uint64_t seed) {
  std::vector<Workload> out;
  SplitMix64 rng{seed ^ 0x7472616365ULL};
  auto conv = serving::load_trace("azure-conv", 256);
  if (!conv.ok()) return conv.status();
  auto mid = [&](const serving::TraceRecord& r) {
    // Mid-generation: the prompt plus a random part of the output, at least one token.
    const std::int64_t gen = r.output_tokens > 0 ? rng.uniform(1, r.output_tokens) : 1;
    return static_cast<int>(std::max<std::int64_t>(1, r.prompt_tokens + gen));
  };
  {
    Workload w = base("T-conv-decode", "Azure conv: 128 requests mid-generation (decode)", "trace",
                      layout);
    for (int i = 0; i < 128; ++i) w.seq_lens.push_back(mid(conv->records[i]));
    out.push_back(w);
  }
  {
    Workload w = base("T-conv-mixed",
                      "Azure conv: 96 decodes + 2 prefill chunks of 512 (chunked prefill)",
                      "trace", layout);
    for (int i = 0; i < 96; ++i) {
      w.seq_lens.push_back(mid(conv->records[128 + i]));
      w.query_lens.push_back(1);
    }
    for (int i = 0; i < 2; ++i) {
      const auto& r = conv->records[224 + i];
      const int prompt = static_cast<int>(std::max<std::int64_t>(512, r.prompt_tokens));
      w.seq_lens.push_back(std::min(prompt, 1024));  // a 512-token chunk after some context
      w.query_lens.push_back(512);
    }
    out.push_back(w);
    // Its two parts alone, timed in the same run: what the mixed call costs over its decode
    // rows and its chunks separately is the price of running them in one call (the bound
    // of issue 23's T-conv-mixed target: the decode rows' time plus the SM time the chunks
    // take from them).
    Workload d = base("T-conv-mixed-decodes", "T-conv-mixed's 96 decode rows alone",
                      "trace-parts", layout);
    Workload c = base("T-conv-mixed-chunks", "T-conv-mixed's 2 prefill chunks of 512 alone",
                      "trace-parts", layout);
    for (std::size_t i = 0; i < w.seq_lens.size(); ++i) {
      Workload& part = w.query_lens[i] == 1 ? d : c;
      part.seq_lens.push_back(w.seq_lens[i]);
      part.query_lens.push_back(w.query_lens[i]);
    }
    out.push_back(d);
    out.push_back(c);
  }
  auto moon = serving::load_trace("mooncake", 64);
  if (!moon.ok()) return moon.status();
  {
    Workload w = base("T-mooncake-decode", "Mooncake: 32 long-context requests (decode)",
                      "trace", layout);
    for (int i = 0; i < 32; ++i) w.seq_lens.push_back(mid(moon->records[i]));
    out.push_back(w);
  }
  return out;
}

std::vector<Workload> sweep_workloads(KVLayout layout) {
  std::vector<Workload> out;
  for (int ctx = 512; ctx <= 32768; ctx *= 2) {
    Workload w = base("ctx-" + std::to_string(ctx), "W1 heads, batch 64, context " +
                      std::to_string(ctx), "sweep-ctx", layout);
    w.seq_lens.assign(64, ctx);
    out.push_back(w);
  }
  for (int b = 1; b <= 256; b *= 2) {
    Workload w = base("batch-" + std::to_string(b), "W1 heads, context 4096, batch " +
                      std::to_string(b), "sweep-batch", layout);
    w.seq_lens.assign(b, 4096);
    out.push_back(w);
  }
  return out;
}

std::vector<Workload> prefill_workloads(KVLayout layout) {
  std::vector<Workload> out;
  auto add = [&](const std::string& name, const std::string& what, int head, int bs,
                 bool chunks) {
    Workload w = base(name, what, "prefill", layout);
    w.head_size = head;
    w.block_size = bs;
    if (chunks) {
      w.seq_lens.assign(4, 8192);
      w.query_lens.assign(4, 2048);
    } else {
      w.seq_lens.assign(1, 8192);
      w.query_lens.assign(1, 8192);
    }
    out.push_back(w);
  };
  add("P-chunks-8k", "4 x 2048 chunks ending 8192, head 128, block 16", 128, 16, true);
  add("P-chunks-8k-b128", "4 x 2048 chunks ending 8192, head 128, block 128", 128, 128,
      true);
  add("P-fresh-8k", "1 x 8192 fresh causal, head 128, block 16", 128, 16, false);
  add("P-fresh-8k-b128", "1 x 8192 fresh causal, head 128, block 128", 128, 128, false);
  add("P-chunks-8k-h64", "4 x 2048 chunks ending 8192, head 64, block 16", 64, 16, true);
  add("P-fresh-8k-h64", "1 x 8192 fresh causal, head 64, block 16", 64, 16, false);
  add("P-chunks-8k-h256", "4 x 2048 chunks ending 8192, head 256, block 16", 256, 16,
      true);
  add("P-fresh-8k-h256", "1 x 8192 fresh causal, head 256, block 16", 256, 16, false);
  // Heads without an instance of their own (masked on the next larger one on Hopper).
  add("P-chunks-8k-h80", "4 x 2048 chunks ending 8192, head 80, block 16", 80, 16, true);
  add("P-chunks-8k-h96", "4 x 2048 chunks ending 8192, head 96, block 16", 96, 16, true);
  add("P-chunks-8k-h192", "4 x 2048 chunks ending 8192, head 192, block 16", 192, 16, true);
  // fp8 caches (bf16 query): converted by the producer of the Hopper kernel.
  add("P-chunks-8k-fp8", "4 x 2048 chunks ending 8192, head 128, block 16, fp8 e4m3 cache", 128,
      16, true);
  out.back().kv_dtype = DType::kFloat8E4M3;
  return out;
}

std::int64_t attention_flops(const Workload& w) {
  std::int64_t pairs = 0;
  for (std::size_t i = 0; i < w.seq_lens.size(); ++i) {
    const std::int64_t n = w.seq_lens[i];
    const std::int64_t q = w.query_lens.empty() ? 1 : w.query_lens[i];
    // Sum over i < q of (n - q + i + 1).
    pairs += q * (n - q) + q * (q + 1) / 2;
  }
  return 4 * pairs * w.head_size * w.num_heads;
}

std::int64_t useful_bytes(const Workload& w) {
  std::int64_t kv_tokens = 0, q_tokens = 0;
  for (std::size_t i = 0; i < w.seq_lens.size(); ++i) {
    const std::int64_t q = w.query_lens.empty() ? 1 : w.query_lens[i];
    if (q <= 0) continue;
    std::int64_t keys = w.seq_lens[i];
    if (w.sliding_window > 0) keys = std::min<std::int64_t>(keys, w.sliding_window + q - 1);
    kv_tokens += keys;
    q_tokens += q;
  }
  const std::int64_t kv = 2 * kv_tokens * w.num_kv_heads * w.head_size *
                          static_cast<std::int64_t>(dtype_size(w.kv_dtype));
  const std::int64_t qo = 2 * q_tokens * w.num_heads * w.head_size *
                          static_cast<std::int64_t>(dtype_size(w.dtype));
  const std::int64_t lse = w.lse ? q_tokens * w.num_heads * 4 : 0;
  return kv + qo + lse;
}

}  // namespace pagedattn::bench
