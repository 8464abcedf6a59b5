// One step of a serving engine over pagedattn's public API, on the CPU backend: size a paged
// KV cache for a model from a memory budget, hand out blocks to sequences, compute the slot
// mapping of the step's new tokens from the block tables, store their keys and values with
// write_kv, plan the step's attention once, allocate and align the workspace the plan asks
// for, run one layer, and check the result against the oracle (reference_attention).
//
// The batch mixes what a chunked-prefill scheduler sends: three decoding sequences (one new
// token each, one of them starting a new block this step) and a chunk of a longer prompt
// whose first chunk was prefilled in an earlier step.
//
// The same calls serve the CUDA backend: the tensors then hold device pointers, `stream` is
// a cudaStream_t, and the host copies of block_table / seq_lens / query_start_loc go to
// plan_attention as HostMetadata (here the tensors are on the host, so from_args does).
//
// Only the installed headers are used (include/pagedattn/). Exit status: 0 the result matches
// the oracle, 1 it does not, 2 a library call failed (its Status is printed) or bad usage.
#include <pagedattn/pagedattn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace pagedattn;

/// The attention shape of one layer of Llama-3.1-8B: 32 query heads, 8 KV heads (GQA 4),
/// head size 128, bf16 activations and cache.
struct ModelShape {
  const char* name = "llama-3.1-8b";
  int num_heads = 32;
  int num_kv_heads = 8;
  int head_size = 128;
  DType dtype = DType::kBFloat16;
};

/// A request as the scheduler sees it this step.
struct Sequence {
  const char* what;
  int cached;      // tokens whose K/V earlier steps stored
  int new_tokens;  // tokens this step computes (1 = decode, more = a prefill chunk)
  std::vector<std::int32_t> blocks;  // the sequence's block table row
  int seq_len() const { return cached + new_tokens; }
};

/// Deterministic test values in [-1, 1) for (kind, sequence, position, element): a token's
/// key is the same whichever step stores it.
float value(std::uint64_t kind, std::uint64_t seq, std::uint64_t pos, std::uint64_t elem) {
  std::uint64_t z = kind * 0x9E3779B97F4A7C15ull ^ seq * 0xBF58476D1CE4E5B9ull ^
                    pos * 0x94D049BB133111EBull ^ (elem + 1) * 0xD6E8FEB86659FD93ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) / static_cast<float>(1ull << 23) - 1.0f;
}

int fail(const char* what, const Status& st) {
  std::fprintf(stderr, "engine_step: %s: %s\n", what, st.to_string().c_str());
  return 2;
}

/// Keys and values of tokens to store, with the slot of each.
struct TokenRows {
  std::vector<std::uint16_t> key, value;  // [rows, num_kv_heads, head_size]
  std::vector<std::int64_t> slots;        // [rows]
};

/// Append the K and V (value kinds 1 and 2) of positions [from, to) of sequence `s`, in the
/// model's dtype, and their slots from the sequence's block table row.
Status append_rows(const ModelShape& m, int block_size, int seq_index, const Sequence& s,
                   int from, int to, TokenRows* rows) {
  const int row_elems = m.num_kv_heads * m.head_size;
  std::vector<float> k(static_cast<std::size_t>(row_elems)), v(k.size());
  for (int pos = from; pos < to; ++pos) {
    // slot = physical block * block_size + offset in the block (vLLM's slot_mapping).
    const std::int32_t block = s.blocks[static_cast<std::size_t>(pos / block_size)];
    rows->slots.push_back(std::int64_t{block} * block_size + pos % block_size);
    for (int e = 0; e < row_elems; ++e) {
      k[static_cast<std::size_t>(e)] = value(1, seq_index, pos, e);
      v[static_cast<std::size_t>(e)] = value(2, seq_index, pos, e);
    }
    const std::size_t at = rows->key.size();
    rows->key.resize(at + k.size());
    rows->value.resize(at + v.size());
    PAGEDATTN_RETURN_IF_ERROR(convert_from_float(k.data(), row_elems, m.dtype, &rows->key[at]));
    PAGEDATTN_RETURN_IF_ERROR(convert_from_float(v.data(), row_elems, m.dtype, &rows->value[at]));
  }
  return Status::Ok();
}

Status write_rows(const ModelShape& m, TokenRows& rows, const KVCache& cache) {
  const auto n = static_cast<std::int64_t>(rows.slots.size());
  return write_kv(
      TensorView::contiguous(rows.key.data(), m.dtype, {n, m.num_kv_heads, m.head_size}),
      TensorView::contiguous(rows.value.data(), m.dtype, {n, m.num_kv_heads, m.head_size}),
      TensorView::contiguous(rows.slots.data(), DType::kInt64, {n}), cache);
}

}  // namespace

int main(int argc, char** argv) {
  // --corrupt-output: change one output element after the run, to show that the check fails
  // (exit status 1); the project's tests run both ways.
  const bool corrupt = argc > 1 && std::string(argv[1]) == "--corrupt-output";
  if (argc > 1 && !corrupt) {
    std::fprintf(stderr, "usage: %s [--corrupt-output]\n", argv[0]);
    return 2;
  }
  const ModelShape m;
  const int block_size = 16;

  // ---- 1. Size the cache: as many blocks as fit in this layer's share of memory.
  const std::int64_t budget_bytes = std::int64_t{64} << 20;  // K + V of one layer
  KVCacheSpec spec;
  spec.layout = KVLayout::kNHD;
  spec.block_size = block_size;
  spec.num_kv_heads = m.num_kv_heads;
  spec.head_size = m.head_size;
  spec.dtype = m.dtype;
  const std::int64_t block_bytes =
      2 * kv_block_elements(spec) * static_cast<std::int64_t>(dtype_size(m.dtype));  // K and V
  spec.num_blocks = budget_bytes / block_bytes;
  Result<std::int64_t> elements = kv_cache_elements(spec);
  if (!elements.ok()) return fail("kv_cache_elements", elements.status());
  std::vector<std::uint16_t> k_pool(static_cast<std::size_t>(*elements));
  std::vector<std::uint16_t> v_pool(k_pool.size());
  Result<KVCache> cache = make_kv_cache(spec, k_pool.data(), v_pool.data());
  if (!cache.ok()) return fail("make_kv_cache", cache.status());
  std::printf("model       %s: %d query heads, %d KV heads, head size %d, %s\n", m.name,
              m.num_heads, m.num_kv_heads, m.head_size, to_string(m.dtype));
  std::printf("cache       %lld blocks of %d tokens (%lld bytes each, K+V) = %lld tokens in "
              "%.1f MiB, layout %s\n",
              static_cast<long long>(spec.num_blocks), block_size,
              static_cast<long long>(block_bytes),
              static_cast<long long>(spec.num_blocks * block_size),
              static_cast<double>(spec.num_blocks * block_bytes) / (1 << 20),
              to_string(spec.layout));

  // ---- 2. The batch, decodes first, and their blocks from a free list. Blocks are handed out
  // from the top of the pool down, so that a block table row is not an identity mapping.
  std::vector<Sequence> seqs = {
      {"decode", 1000, 1, {}},
      {"decode", 37, 1, {}},
      {"decode (new block)", 512, 1, {}},
      {"prefill chunk 2", 128, 128, {}},  // a 300-token prompt: tokens 128..255 this step
  };
  std::vector<std::int32_t> free_blocks;
  for (std::int64_t b = 0; b < spec.num_blocks; ++b) free_blocks.push_back(static_cast<std::int32_t>(b));
  for (Sequence& s : seqs) {
    const int need = (s.seq_len() + block_size - 1) / block_size;
    while (static_cast<int>(s.blocks.size()) < need) {
      if (free_blocks.empty()) {
        std::fprintf(stderr, "engine_step: the cache is full\n");
        return 2;
      }
      s.blocks.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
  }
  const int num_seqs = static_cast<int>(seqs.size());

  // ---- 3. What earlier steps stored: every cached token's K/V.
  {
    TokenRows history;
    for (int i = 0; i < num_seqs; ++i) {
      Status st = append_rows(m, block_size, i, seqs[static_cast<std::size_t>(i)], 0,
                              seqs[static_cast<std::size_t>(i)].cached, &history);
      if (!st.ok()) return fail("convert_from_float", st);
    }
    Status st = write_rows(m, history, *cache);
    if (!st.ok()) return fail("write_kv (history)", st);
  }

  // ---- 4. This step's metadata: block table, lengths, query offsets; then its new K/V.
  int width = 0;
  for (const Sequence& s : seqs) width = std::max(width, static_cast<int>(s.blocks.size()));
  std::vector<std::int32_t> block_table(static_cast<std::size_t>(num_seqs) * width, -1);
  std::vector<std::int32_t> seq_lens(static_cast<std::size_t>(num_seqs));
  std::vector<std::int32_t> query_start_loc(static_cast<std::size_t>(num_seqs) + 1, 0);
  TokenRows step;
  for (int i = 0; i < num_seqs; ++i) {
    const Sequence& s = seqs[static_cast<std::size_t>(i)];
    for (std::size_t j = 0; j < s.blocks.size(); ++j)
      block_table[static_cast<std::size_t>(i) * width + j] = s.blocks[j];
    seq_lens[static_cast<std::size_t>(i)] = s.seq_len();  // includes the new tokens
    query_start_loc[static_cast<std::size_t>(i) + 1] =
        query_start_loc[static_cast<std::size_t>(i)] + s.new_tokens;
    Status st = append_rows(m, block_size, i, s, s.cached, s.seq_len(), &step);
    if (!st.ok()) return fail("convert_from_float", st);
  }
  const std::int64_t num_tokens = query_start_loc.back();
  for (int i = 0; i < num_seqs; ++i) {
    const Sequence& s = seqs[static_cast<std::size_t>(i)];
    std::printf("seq %d       %-19s seq_len %4d, %3d new token%s, %zu blocks (first %d), "
                "first new slot %lld\n",
                i, s.what, s.seq_len(), s.new_tokens, s.new_tokens == 1 ? "" : "s",
                s.blocks.size(), s.blocks.front(),
                static_cast<long long>(step.slots[static_cast<std::size_t>(
                    query_start_loc[static_cast<std::size_t>(i)])]));
  }
  {
    Status st = write_rows(m, step, *cache);  // the new tokens must be in the cache first
    if (!st.ok()) return fail("write_kv", st);
  }

  // Queries of the new tokens, [num_tokens, num_heads, head_size].
  const std::int64_t q_elems = num_tokens * m.num_heads * m.head_size;
  std::vector<float> q_f(static_cast<std::size_t>(q_elems));
  {
    std::int64_t at = 0;
    for (int i = 0; i < num_seqs; ++i) {
      const Sequence& s = seqs[static_cast<std::size_t>(i)];
      for (int pos = s.cached; pos < s.seq_len(); ++pos)
        for (int e = 0; e < m.num_heads * m.head_size; ++e)
          q_f[static_cast<std::size_t>(at++)] = value(0, i, pos, e);
    }
  }
  std::vector<std::uint16_t> query(q_f.size()), out(q_f.size());
  if (Status st = convert_from_float(q_f.data(), q_elems, m.dtype, query.data()); !st.ok())
    return fail("convert_from_float", st);
  std::vector<float> lse(static_cast<std::size_t>(num_tokens * m.num_heads));

  AttentionArgs args;
  args.query = TensorView::contiguous(query.data(), m.dtype, {num_tokens, m.num_heads, m.head_size});
  args.out = TensorView::contiguous(out.data(), m.dtype, {num_tokens, m.num_heads, m.head_size});
  args.lse = TensorView::contiguous(lse.data(), DType::kFloat32, {num_tokens, m.num_heads});
  args.cache = *cache;
  args.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {num_seqs, width});
  args.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {num_seqs});
  args.query_start_loc =
      TensorView::contiguous(query_start_loc.data(), DType::kInt32, {num_seqs + 1});
  args.params.scale = default_scale(m.head_size);

  // ---- 5. Plan once per step (validates the metadata values), then size the workspace.
  Result<AttentionPlan> plan = plan_attention(args, HostMetadata::from_args(args));
  if (!plan.ok()) return fail("plan_attention", plan.status());
  const KernelChoice& choice = plan->choice();
  const std::size_t ws_bytes = plan->workspace_bytes();
  // Any allocator will do, at an address that is a multiple of kWorkspaceAlignment.
  std::vector<unsigned char> ws_storage(ws_bytes + kWorkspaceAlignment);
  void* workspace = ws_storage.data();
  std::size_t space = ws_storage.size();
  if (std::align(kWorkspaceAlignment, ws_bytes, workspace, space) == nullptr) {
    std::fprintf(stderr, "engine_step: cannot align the workspace\n");
    return 2;
  }
  std::printf("plan        %s, %d tile tokens, %d split%s, workspace %zu bytes (aligned to %zu): "
              "%s\n",
              to_string(choice.kernel), choice.tile_tokens, choice.num_splits,
              choice.num_splits == 1 ? "" : "s", ws_bytes, kWorkspaceAlignment,
              choice.reason.c_str());

  // ---- 6. Run the layer (per layer of the model: the same plan, that layer's cache and q).
  if (Status st = run_attention(*plan, args, ws_bytes > 0 ? workspace : nullptr, ws_bytes);
      !st.ok())
    return fail("run_attention", st);

  if (corrupt) out[out.size() / 2] ^= 0x4000;  // an exponent bit of one bf16 element

  // ---- 7. Check against the oracle: the same inputs, output in fp32.
  std::vector<float> ref_out(q_f.size()), ref_lse(lse.size()), got(q_f.size());
  AttentionArgs ref = args;
  ref.out = TensorView::contiguous(ref_out.data(), DType::kFloat32,
                                   {num_tokens, m.num_heads, m.head_size});
  ref.lse = TensorView::contiguous(ref_lse.data(), DType::kFloat32, {num_tokens, m.num_heads});
  if (Status st = reference_attention(ref); !st.ok()) return fail("reference_attention", st);
  if (Status st = convert_to_float(out.data(), q_elems, m.dtype, got.data()); !st.ok())
    return fail("convert_to_float", st);
  // Budget |got - ref| <= atol + rtol * |ref|: bf16 output rounding is 2^-8 relative at most,
  // and the kernel's fp32 arithmetic adds far less (the library's own tests use the same
  // bf16 budget, docs/DESIGN.md §4). LSE is fp32 throughout.
  const double atol = 8e-3, rtol = 8e-3, lse_atol = 1e-4, lse_rtol = 1e-5;
  double worst = 0, max_err = 0;
  std::int64_t failed = 0;
  auto compare = [&](double g, double r, double a, double rt) {
    const double err = std::fabs(g - r);
    const double ratio = err / (a + rt * std::fabs(r));
    if (!(ratio <= 1.0)) ++failed;  // NaN fails too
    if (!(ratio <= worst)) worst = ratio;
    if (!(err <= max_err)) max_err = err;
  };
  for (std::size_t i = 0; i < got.size(); ++i) compare(got[i], ref_out[i], atol, rtol);
  for (std::size_t i = 0; i < lse.size(); ++i) compare(lse[i], ref_lse[i], lse_atol, lse_rtol);
  const std::size_t checked = got.size() + lse.size();
  std::printf("check       %lld query tokens: %zu elements (out and lse) against "
              "reference_attention, max |error| %.3g, worst %.3g of the budget, %lld failed\n",
              static_cast<long long>(num_tokens), checked, max_err, worst,
              static_cast<long long>(failed));
  std::printf("result      %s\n", failed == 0 ? "PASS" : "FAIL");
  return failed == 0 ? 0 : 1;
}
