// The correctness matrix as data (DESIGN.md §4): case names, a deterministic pairwise
// generator over every axis, named cases for each fault class of DESIGN.md §5, and the
// `quick` subset for compute-sanitizer.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "src/testing/harness.h"

namespace pagedattn::testing {

namespace {

/// A number for a name: "5", "0p05", "m2" (letters, digits and '_' only).
std::string num_tag(double v) {
  // Whole numbers as integers ({:g} would print 2147483647 as 2.14748e+09).
  std::string s = v == std::floor(v) && std::fabs(v) < 1e18
                      ? fmt::format("{}", static_cast<long long>(v))
                      : fmt::format("{:g}", v);
  std::string out;
  for (char ch : s) {
    if (ch == '.')
      out += 'p';
    else if (ch == '-')
      out += 'm';
    else if (ch == '+')
      continue;
    else
      out += ch;
  }
  return out;
}

const char* kv_tag(DType kv) {
  switch (kv) {
    case DType::kFloat8E4M3:
      return "fp8e4m3";
    case DType::kFloat8E5M2:
      return "fp8e5m2";
    default:
      return to_string(kv);
  }
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

/// '*' matches any run, '?' one character.
bool glob_match(const char* pat, const char* str) {
  // Iterative matcher with one backtrack point (the last '*'), linear in practice.
  const char* star = nullptr;
  const char* resume = nullptr;
  while (*str) {
    if (*pat == '?' || *pat == *str) {
      ++pat;
      ++str;
    } else if (*pat == '*') {
      star = pat++;
      resume = str;
    } else if (star) {
      pat = star + 1;
      str = ++resume;
    } else {
      return false;
    }
  }
  while (*pat == '*') ++pat;
  return *pat == '\0';
}

}  // namespace

std::string case_name(const CaseConfig& c) {
  std::string n = fmt::format("{}_bs{}_h{}_q{}kv{}_{}", to_string(c.layout), c.block_size,
                              c.head_size, c.num_heads, c.num_kv_heads, to_string(c.dtype));
  if (c.kv_dtype != c.dtype) n += std::string("_") + kv_tag(c.kv_dtype);
  if (c.sliding_window != 0) n += "_window" + num_tag(c.sliding_window);
  if (c.softcap != 0.0f) n += "_softcap" + num_tag(c.softcap);
  if (c.alibi) n += "_alibi";
  if (c.sinks) n += "_sinks";
  if (c.page_pad != 0) n += "_pad" + num_tag(static_cast<double>(c.page_pad));
  if (c.plan.tile_tokens != 0) n += "_tile" + num_tag(c.plan.tile_tokens);
  if (c.plan.num_splits != 0) n += "_splits" + num_tag(c.plan.num_splits);
  if (c.plan.num_threads != 0) n += "_threads" + num_tag(c.plan.num_threads);
  if (is_fp8(c.kv_dtype) && (c.k_scale != 1.0f || c.v_scale != 1.0f)) {
    n += c.k_scale == 0.0f ? std::string("_ksauto") : "_ks" + num_tag(c.k_scale);
    n += c.v_scale == 0.0f ? std::string("_vsauto") : "_vs" + num_tag(c.v_scale);
  }
  if (c.scale != 0.0f) n += "_scale" + num_tag(c.scale);
  if (c.token_pad != 0) n += "_tokpad" + num_tag(static_cast<double>(c.token_pad));
  if (c.head_pad != 0) n += "_headpad" + num_tag(static_cast<double>(c.head_pad));
  if (c.value_page_pad >= 0 && c.value_page_pad != c.page_pad)
    n += "_vpad" + num_tag(static_cast<double>(c.value_page_pad));
  if (c.out_token_pad >= 0 && c.out_token_pad != c.token_pad)
    n += "_outpad" + num_tag(static_cast<double>(c.out_token_pad));
  if (c.in_place) n += "_inplace";
  if (c.strided_metadata) n += "_stridedmeta";
  if (c.slot_dtype == DType::kInt32) n += "_i32slots";
  if (!c.lse) n += "_nolse";
  if (c.nan_query) n += "_nanq";
  if (c.neg_inf_keys) n += "_ninfk";
  if (c.neg_inf_sinks) n += "_ninfsink";
  if (!c.tag.empty()) {
    n += "_" + c.tag;
  } else {
    int max_len = 0, tokens = 0;
    for (std::size_t i = 0; i < c.seq_lens.size(); ++i) {
      max_len = std::max(max_len, c.seq_lens[i]);
      if (i < c.query_lens.size()) tokens += c.query_lens[i];
    }
    n += fmt::format("_s{}_max{}_t{}", c.seq_lens.size(), max_len, tokens);
  }
  return n;
}

std::vector<CaseConfig> select_cases(const std::vector<CaseConfig>& cases,
                                     const std::string& glob,
                                     std::vector<std::string>* unmatched) {
  if (unmatched != nullptr) unmatched->clear();
  if (glob.empty()) return cases;
  std::vector<std::string> patterns;
  std::size_t start = 0;
  while (start <= glob.size()) {
    const std::size_t comma = glob.find(',', start);
    const std::size_t end = comma == std::string::npos ? glob.size() : comma;
    if (end > start) patterns.push_back(glob.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  std::vector<bool> used(patterns.size(), false);
  std::vector<CaseConfig> out;
  for (const CaseConfig& c : cases) {
    const std::string name = c.name.empty() ? case_name(c) : c.name;
    bool selected = false;
    // Every pattern is tried (not only up to the first match) so that each one's use is known.
    for (std::size_t i = 0; i < patterns.size(); ++i) {
      if (patterns[i] == "all" || glob_match(patterns[i].c_str(), name.c_str())) {
        used[i] = true;
        selected = true;
      }
    }
    if (selected) out.push_back(c);
  }
  if (unmatched != nullptr)
    for (std::size_t i = 0; i < patterns.size(); ++i)
      if (!used[i]) unmatched->push_back(patterns[i]);
  return out;
}

// ------------------------------------------------------------------ pairwise generator
namespace {

/// Deterministic greedy pairwise (2-way) covering array, AETG style: while some valid pair of
/// axis values is uncovered, start a row from the first uncovered pair and fill each other
/// axis with the value that covers the most uncovered pairs (ties: the least used value, then
/// the lowest). `valid` sees partial rows (-1 = unset) and must accept any row that can still
/// be completed; a pair that `valid` rejects on its own is not required.
std::vector<std::vector<int>> pairwise_rows(
    const std::vector<int>& sizes, const std::function<bool(const std::vector<int>&)>& valid) {
  using Index = std::size_t;
  const Index n = sizes.size();
  auto size_of = [&](Index axis) { return static_cast<Index>(sizes[axis]); };
  // uncovered[a][b][va * size_of(b) + vb], for axes a < b.
  std::vector<std::vector<std::vector<char>>> uncovered(n, std::vector<std::vector<char>>(n));
  std::int64_t remaining = 0;
  for (Index a = 0; a < n; ++a) {
    for (Index b = a + 1; b < n; ++b) {
      std::vector<char>& cell = uncovered[a][b];
      cell.assign(size_of(a) * size_of(b), 0);
      for (Index va = 0; va < size_of(a); ++va)
        for (Index vb = 0; vb < size_of(b); ++vb) {
          std::vector<int> row(n, -1);
          row[a] = static_cast<int>(va);
          row[b] = static_cast<int>(vb);
          if (valid(row)) {
            cell[va * size_of(b) + vb] = 1;
            ++remaining;
          }
        }
    }
  }
  auto cell_of = [&](Index a, int va, Index b, int vb) -> char& {
    if (a > b) {
      std::swap(a, b);
      std::swap(va, vb);
    }
    return uncovered[a][b][static_cast<Index>(va) * size_of(b) + static_cast<Index>(vb)];
  };
  std::vector<std::vector<int>> usage(n);
  for (Index a = 0; a < n; ++a) usage[a].assign(size_of(a), 0);

  std::vector<std::vector<int>> rows;
  while (remaining > 0) {
    std::vector<int> row(n, -1);
    // Seed: the first uncovered pair.
    bool seeded = false;
    for (Index a = 0; a < n && !seeded; ++a)
      for (Index b = a + 1; b < n && !seeded; ++b)
        for (int va = 0; va < sizes[a] && !seeded; ++va)
          for (int vb = 0; vb < sizes[b] && !seeded; ++vb)
            if (cell_of(a, va, b, vb)) {
              row[a] = va;
              row[b] = vb;
              seeded = true;
            }
    // Fill the other axes greedily.
    for (Index k = 0; k < n; ++k) {
      if (row[k] >= 0) continue;
      int best = -1, best_gain = -1, best_use = 0;
      for (int v = 0; v < sizes[k]; ++v) {
        row[k] = v;
        if (!valid(row)) continue;
        int gain = 0;
        for (Index j = 0; j < n; ++j)
          if (j != k && row[j] >= 0 && cell_of(j, row[j], k, v)) ++gain;
        const int use = usage[k][static_cast<Index>(v)];
        if (gain > best_gain || (gain == best_gain && use < best_use)) {
          best = v;
          best_gain = gain;
          best_use = use;
        }
      }
      row[k] = best;  // `valid` accepts some value for every completable row
    }
    for (Index a = 0; a < n; ++a) {
      ++usage[a][static_cast<Index>(row[a])];
      for (Index b = a + 1; b < n; ++b) {
        char& cell = cell_of(a, row[a], b, row[b]);
        if (cell) {
          cell = 0;
          --remaining;
        }
      }
    }
    rows.push_back(row);
  }
  return rows;
}

// ---- axis values (DESIGN.md §1, §4) ----
const KVLayout kLayouts[] = {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND};
const int kHeadSizes[] = {32, 64, 80, 96, 112, 120, 128, 192, 256};
const int kBlockSizes[] = {1, 16, 32, 544, 2048};
/// GQA ratios 4, 1, 8, 5 and 16 (MQA).
const std::pair<int, int> kHeads[] = {{32, 8}, {40, 40}, {64, 8}, {20, 4}, {16, 1}};
const DType kDTypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
/// Index 0 = "auto" (the query dtype).
const DType kKVTypes[] = {DType::kFloat32 /* auto */, DType::kFloat8E4M3, DType::kFloat8E5M2};
enum Feature { kNone, kSoftcap, kWindow, kAlibi, kSinks, kAll, kNumFeatures };
enum Profile { kDecode, kPrefill, kLong, kNumProfiles };
const char* const kProfileNames[] = {"decode", "prefill", "long"};

/// Aligned page padding (16 bytes for every dtype) for the matrix; odd paddings are named cases.
constexpr std::int64_t kMatrixPagePad = 32;
/// Softcap for the matrix: with the boosted scale the logits have a standard deviation of about
/// 2 and a maximum near 7, so a cap of 5 bends the large ones.
constexpr float kMatrixSoftcap = 5.0f;

bool split_ok(KVLayout layout, DType kv, int head_size) {
  return layout != KVLayout::kSplit || head_size % static_cast<int>(16 / dtype_size(kv)) == 0;
}

/// Unused blocks in a matrix case's pool: enough for a random permutation with gaps, but few
/// for huge blocks (one 2048-token block of 40 heads x 256 is 84 MB of fp32).
int matrix_extra_blocks(int bs) { return bs >= 512 ? 1 : 3; }

/// Work of one case in units of about a nanosecond: the oracle's and the backend's QK and PV
/// over every attended key, generating and writing every KV element, and the passes over the
/// whole cache allocation (poison, copies, bitwise writer check). Keeps the CPU matrix fast.
std::int64_t case_cost(int bs, int num_heads, int num_kv_heads, int head_size,
                       const std::vector<std::pair<int, int>>& seqs /* (seq_len, query_len) */) {
  std::int64_t cost = 0, blocks = matrix_extra_blocks(bs);
  for (const auto& [slen, qlen] : seqs) {
    const std::int64_t keys = static_cast<std::int64_t>(qlen) * slen;  // upper bound
    cost += 2 * keys * num_heads * head_size + 8LL * slen * num_kv_heads * head_size;
    blocks += (slen + bs - 1) / bs;
  }
  return cost + 8LL * blocks * bs * num_kv_heads * head_size;
}

/// Per-case budget for the CPU matrix (see case_cost); the sum over the matrix keeps the
/// whole CPU suite around a minute on 2 cores.
constexpr std::int64_t kCaseBudget = 160'000'000;

/// (seq_len, query_len) for a lengths profile, most important entries first, trimmed to the
/// budget (the first entry is always kept), then put in a fixed interleaved order so that a
/// skipped (query_len 0) sequence sits between others.
std::vector<std::pair<int, int>> profile_lengths(Profile p, int bs, int num_heads, int num_kv_heads,
                                                 int head_size) {
  std::vector<std::pair<int, int>> prio;
  switch (p) {
    case kDecode:
      // Boundary classes of DESIGN.md §4: 1, block-1, block, block+1, several blocks, and a
      // skipped sequence with context.
      prio = {{bs + 1, 1}, {1, 1}, {bs, 1}};
      if (bs > 1) prio.push_back({bs - 1, 1});
      prio.push_back({bs + 2, 0});
      prio.push_back({std::max(3 * bs + 7, 77), 1});
      break;
    case kPrefill:
      // Chunked prefill mixed with decodes: a first chunk, a chunk crossing a block boundary,
      // a chunk longer than a block, decodes, a skipped sequence.
      prio = {{std::max(bs - 2, 0) + 5, 5},
              {9, 9},
              {bs + 1, 1},
              {11, 0},
              {bs + 3 + std::min(bs + 1, 33), std::min(bs + 1, 33)},
              {2 * bs + 1, 3},
              {1, 1}};
      break;
    case kLong:
      prio = {{4097, 1}, {2500, 6}, {1, 1}, {bs + 1, 0}};
      break;
    default:
      break;
  }
  std::vector<std::pair<int, int>> keep{prio.front()};
  for (std::size_t i = 1; i < prio.size(); ++i) {
    keep.push_back(prio[i]);
    if (case_cost(bs, num_heads, num_kv_heads, head_size, keep) > kCaseBudget) keep.pop_back();
  }
  // Interleave: odd positions from the back, so the skipped entry (late in `prio`) lands in the
  // middle rather than at an end.
  std::vector<std::pair<int, int>> out;
  std::size_t lo = 0, hi = keep.size();
  while (lo < hi) {
    out.push_back(keep[lo++]);
    if (lo < hi) out.push_back(keep[--hi]);
  }
  return out;
}

void set_lengths(CaseConfig* c, const std::vector<std::pair<int, int>>& seqs) {
  c->seq_lens.clear();
  c->query_lens.clear();
  for (const auto& [s, q] : seqs) {
    c->seq_lens.push_back(s);
    c->query_lens.push_back(q);
  }
}

int max_len(const CaseConfig& c) { return *std::max_element(c.seq_lens.begin(), c.seq_lens.end()); }

void apply_feature(CaseConfig* c, int feature) {
  // A window of a third of the longest sequence: shorter than most sequences, so it cuts, and
  // it falls inside blocks rather than on their edges for most block sizes.
  const int window = std::max(1, max_len(*c) / 3);
  switch (feature) {
    case kSoftcap:
      c->softcap = kMatrixSoftcap;
      break;
    case kWindow:
      c->sliding_window = window;
      break;
    case kAlibi:
      c->alibi = true;
      break;
    case kSinks:
      c->sinks = true;
      break;
    case kAll:
      c->softcap = kMatrixSoftcap;
      c->sliding_window = window;
      c->alibi = true;
      c->sinks = true;
      break;
    default:
      break;
  }
}

/// One decode fast-path case (the dmma and dsmall cases of add_named_cases).
struct DecodeCase {
  KVLayout layout;
  int block, head, heads, kv_heads;
  DType dt;
  int feature;  // set_decode_features
  std::int64_t pad;
  int splits;
  std::vector<std::pair<int, int>> lens = {};  // (seq_len, query_len); empty: the dmma lengths
  std::vector<int> planned = {};               // CaseConfig::planned_seq_lens
};

/// The feature sets of the decode fast-path cases: 0 none, 1 softcap + ALiBi + sinks,
/// 2 window 100, 3 window 100 + sinks; with padded pages and forced splits (0 = planned).
void set_decode_features(CaseConfig* c, int feature, std::int64_t pad, int splits) {
  if (feature == 1) {
    c->softcap = 30.0f;
    c->alibi = true;
    c->sinks = true;
  }
  if (feature >= 2) c->sliding_window = 100;
  if (feature == 3) c->sinks = true;
  c->page_pad = pad;
  c->plan.num_splits = splits;
}

CaseConfig base(Device device, KVLayout layout, int bs, int head_size, int heads, int kv_heads,
                DType dtype, DType kv) {
  CaseConfig c;
  c.device = device;
  c.layout = layout;
  c.block_size = bs;
  c.head_size = head_size;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.dtype = dtype;
  c.kv_dtype = kv;
  return c;
}

/// Name and seed from the configuration (the seed from the name, so that adding a case never
/// changes another case's inputs).
CaseConfig finish(CaseConfig c) {
  if (c.name.empty()) c.name = case_name(c);
  c.seed = fnv1a(c.name) & 0xFFFFFFFFull;
  return c;
}

/// The fault classes of DESIGN.md §5 as named cases. `quick` keeps one small case per class.
void add_named_cases(Device dev, bool quick, std::vector<CaseConfig>* out) {
  auto add = [&](CaseConfig c) { out->push_back(finish(std::move(c))); };
  const DType f32 = DType::kFloat32, f16 = DType::kFloat16, b16 = DType::kBFloat16;
  const DType e4m3 = DType::kFloat8E4M3, e5m2 = DType::kFloat8E5M2;

  // query_len == 0 sequences between others (and at both ends, and with seq_len 0): they read
  // nothing and must not write their neighbour's row.
  for (KVLayout l : kLayouts) {
    if (quick && l != KVLayout::kNHD) continue;
    CaseConfig c = base(dev, l, 16, 64, 8, 2, f16, f16);
    set_lengths(&c, {{20, 0}, {17, 1}, {0, 0}, {30, 5}, {18, 0}, {16, 1}, {5, 0}});
    c.tag = "zeroq";
    add(c);
  }
  {
    // Every sequence skipped (the all-zero query_start_loc of CUDA-graph capture): no rows.
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, b16, b16);
    set_lengths(&c, {{20, 0}, {0, 0}, {33, 0}});
    c.tag = "allzeroq";
    add(c);
  }

  // Sliding window off by one: window 1 (only the current token), window == seq_len,
  // window == seq_len - 1 and seq_len + 1, decode and prefill rows at the edges.
  for (DType dt : {f32, b16}) {
    if (quick && dt == b16) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, dt, dt);
    set_lengths(&c, {{17, 1}, {33, 4}, {1, 1}, {16, 16}});
    c.sliding_window = 1;
    c.tag = "win1";
    add(c);
  }
  for (KVLayout l : kLayouts) {
    if (quick && l == KVLayout::kHND) continue;
    CaseConfig c = base(dev, l, 16, 64, 8, 2, f32, f32);
    // W = 37: seq_len == W, == W + 1 (window = seq_len - 1), == W - 1, a prefill chunk whose
    // rows cross the window edge, and a full prefill of exactly W tokens.
    set_lengths(&c, {{37, 1}, {38, 1}, {36, 1}, {45, 12}, {37, 37}});
    c.sliding_window = 37;
    c.tag = "winedge";
    add(c);
  }
  if (!quick) {
    // Decode and prefill of the same window in one batch (the two paths must agree).
    CaseConfig c = base(dev, KVLayout::kHND, 32, 128, 16, 4, f16, f16);
    set_lengths(&c, {{100, 1}, {100, 20}, {99, 1}, {130, 64}});
    c.sliding_window = 30;
    c.tag = "windecprefill";
    add(c);
  }

  // Tile != block: tiles much smaller than a block, and tiles spanning many blocks.
  for (KVLayout l : {KVLayout::kNHD, KVLayout::kSplit}) {
    if (quick && l == KVLayout::kSplit) continue;
    CaseConfig c = base(dev, l, 544, 128, 8, 8, b16, b16);
    set_lengths(&c, {{545, 1}, {1100, 3}, {543, 1}});
    c.plan.tile_tokens = 16;
    c.tag = "tilelt";
    add(c);
  }
  for (int bs : {1, 16}) {
    CaseConfig c = base(dev, KVLayout::kHND, bs, 96, 8, 2, f16, f16);
    set_lengths(&c, {{200, 1}, {130, 7}, {15, 1}, {64, 2}});
    c.plan.tile_tokens = 64;
    c.tag = "tilegt";
    add(c);
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 4, 2, f32, f32);
    set_lengths(&c, {{40, 1}, {20, 5}});
    c.plan.tile_tokens = 1;
    c.tag = "tile1";
    add(c);
  }

  // Forced KV splits (the CPU backend may ignore them): more splits than tiles, a split
  // boundary inside a window, sinks that only one split may carry.
  for (int splits : {1, 3, 7}) {
    if (quick && splits == 1) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, f16, f16);
    set_lengths(&c, {{1000, 1}, {5, 1}, {300, 4}, {2, 2}});
    c.plan.num_splits = splits;
    c.tag = "splits";
    add(c);
  }
  {
    CaseConfig c = base(dev, KVLayout::kHND, 32, 64, 16, 2, b16, b16);
    set_lengths(&c, {{1500, 1}, {700, 3}, {3, 1}});
    c.plan.num_splits = 7;
    c.sliding_window = 600;
    c.sinks = true;
    c.alibi = true;
    c.tag = "splitsfeat";
    add(c);
  }

  // Padded pages (hybrid models), each layout, aligned and odd padding.
  for (KVLayout l : kLayouts) {
    for (std::int64_t pad : {std::int64_t{32}, std::int64_t{3}}) {
      if (quick && pad == 32) continue;
      CaseConfig c = base(dev, l, 16, 64, 8, 4, f16, l == KVLayout::kHND ? e4m3 : f16);
      set_lengths(&c, {{17, 1}, {40, 6}, {15, 1}});
      c.page_pad = pad;
      c.tag = "padded";
      add(c);
    }
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 544, 128, 8, 2, b16, e4m3);
    set_lengths(&c, {{545, 1}, {1000, 5}});
    c.page_pad = 100;
    c.tag = "padded";
    add(c);
  }

  // fp8 scales != 1 (data scaled so that fp8 is not saturated), derived scales, saturation.
  for (DType kv : {e4m3, e5m2}) {
    for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD}) {
      if (quick && l == KVLayout::kNHD) continue;
      CaseConfig c = base(dev, l, 16, 128, 8, 2, f16, kv);
      set_lengths(&c, {{50, 1}, {33, 9}, {16, 1}});
      c.k_scale = 0.05f;
      c.v_scale = 3.0f;
      c.tag = "fp8scale";
      add(c);
    }
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kHND, 32, 64, 8, 2, b16, e4m3);
    set_lengths(&c, {{70, 1}, {40, 8}});
    c.k_scale = 0.0f;  // derived: amax / 64
    c.v_scale = 0.0f;
    c.tag = "fp8scale";
    add(c);
    // k / 0.001 reaches 1000 > 448: the writer saturates (bitwise against the writer oracle),
    // and the reader sees the saturated values.
    CaseConfig s = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f32, e4m3);
    set_lengths(&s, {{40, 1}, {20, 4}});
    s.k_scale = 0.001f;
    s.v_scale = 0.001f;
    s.tag = "fp8sat";
    add(s);
  }

  // head_size 64 with the last query row at the very end of its allocation (run_case sizes the
  // query exactly): many decode rows, GQA 4 (Llama-3.2-1B), and a token-strided variant.
  for (DType dt : {f16, b16}) {
    for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD}) {
      if (quick && !(dt == f16 && l == KVLayout::kSplit)) continue;
      CaseConfig c = base(dev, l, 16, 64, 32, 8, dt, dt);
      std::vector<std::pair<int, int>> seqs;
      for (int i = 0; i < 33; ++i) seqs.push_back({1 + (i * 37) % 97, 1});
      set_lengths(&c, seqs);
      c.tag = "lastrow";
      add(c);
    }
  }
  {
    CaseConfig c = base(dev, KVLayout::kHND, 16, 64, 32, 8, f16, f16);
    set_lengths(&c, {{30, 1}, {17, 3}, {64, 1}});
    c.token_pad = 24;
    c.slot_dtype = DType::kInt32;
    c.tag = "strided";
    add(c);
  }

  {
    // Head-strided activations and strided metadata (block-table rows padded with -1 ids,
    // seq_lens / query_start_loc every other element).
    CaseConfig c = base(dev, KVLayout::kSplit, 16, 128, 16, 4, b16, b16);
    set_lengths(&c, {{40, 1}, {0, 0}, {33, 6}, {17, 1}});
    c.head_pad = 8;
    c.strided_metadata = true;
    c.tag = "strided";
    add(c);
  }

  // K and V caches with different block strides (different page padding): every kernel must
  // address V through V's own strides (vLLM's kernels take `kv_block_stride` from the key cache
  // and use it for both). Shapes that reach, on an H200, the decode fast path (grid, small-call
  // and head-64 pairs), the prefill kernel beside decode rows, and the tiled kernel (odd
  // padding, fp32, fp8), in every layout.
  {
    struct KV {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      std::int64_t kpad, vpad;
      std::vector<std::pair<int, int>> lens;
    };
    const std::vector<std::pair<int, int>> dec = {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}};
    const std::vector<std::pair<int, int>> mix = {{300, 40}, {50, 50}, {33, 1}, {17, 0}, {129, 1}};
    const KV kvs[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, 0, 64, dec},
        {KVLayout::kHND, 16, 128, 32, 8, f16, f16, 32, 0, mix},
        {KVLayout::kSplit, 16, 64, 16, 2, b16, b16, 0, 40, dec},
        {KVLayout::kNHD, 16, 64, 32, 8, b16, b16, 8, 72, dec},  // head-64 pairs
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, 0, 64, {{1024, 1}}},  // small-call
        {KVLayout::kSplit, 32, 96, 12, 4, f32, f32, 3, 0, mix},
        {KVLayout::kHND, 16, 128, 16, 4, b16, e4m3, 16, 48, mix},
    };
    int i = 0;
    for (const KV& k : kvs) {
      ++i;
      if (quick) continue;  // the sanitizer subset is at its size limit
      CaseConfig c = base(dev, k.layout, k.block, k.head, k.heads, k.kv_heads, k.dt, k.kv);
      set_lengths(&c, k.lens);
      c.page_pad = k.kpad;
      c.value_page_pad = k.vpad;
      if (is_fp8(k.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = "kvstride" + std::to_string(i);
      add(c);
    }
  }

  // The output with other strides than the query (a kernel that stores with the query's
  // strides writes the wrong rows), and attention in place (out is the query view, which
  // AttentionArgs allows: every row must read its query before an output is stored over it,
  // across KV splits and merges). On an H200: the decode fast path with its split merges and
  // forced splits, the small-call kernel, head-64 pairs, the prefill kernel beside decode rows,
  // the tiled kernel with splits (fp32, odd padding).
  {
    struct O {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt;
      std::int64_t qpad, opad, hpad;  // token_pad, out_token_pad (-1: in place), head_pad
      int splits;
      std::vector<std::pair<int, int>> lens;
    };
    const std::vector<std::pair<int, int>> dec = {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}};
    const std::vector<std::pair<int, int>> mix = {{300, 40}, {50, 50}, {33, 1}, {17, 0}, {129, 1}};
    const O os[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 24, 0, 0, dec},
        {KVLayout::kHND, 16, 128, 32, 8, f16, 16, 0, 0, 0, mix},
        {KVLayout::kSplit, 16, 96, 12, 4, f32, 0, 5, 0, 3, mix},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 40, 8, 0, {{1024, 1}}},  // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, -1, 0, 0, dec},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 0, -1, 0, 5, dec},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, -1, 0, 0, {{1024, 1}}},  // small-call
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, -1, 0, 0, dec},           // head-64 pairs
        {KVLayout::kHND, 16, 128, 32, 8, b16, 24, -1, 8, 0, mix},
        {KVLayout::kSplit, 16, 96, 12, 4, f32, 0, -1, 0, 3, mix},
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 0, -1, 0, 70, {{9000, 1}}},  // the merge kernel
    };
    int i = 0;
    for (const O& o : os) {
      ++i;
      if (quick) continue;
      CaseConfig c = base(dev, o.layout, o.block, o.head, o.heads, o.kv_heads, o.dt, o.dt);
      set_lengths(&c, o.lens);
      c.token_pad = o.qpad;
      c.head_pad = o.hpad;
      if (o.opad < 0) {
        c.in_place = true;
      } else {
        c.out_token_pad = o.opad;
      }
      c.plan.num_splits = o.splits;
      c.tag = "outview" + std::to_string(i);
      add(c);
    }
  }

  // Long prefill chunks: many query tiles per sequence, causal masking across tiles, with and
  // without a window that cuts through the chunk.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f16, f16);
    if (quick) {
      set_lengths(&c, {{300, 300}, {5, 1}});
    } else {
      set_lengths(&c, {{600, 600}, {700, 200}, {5, 1}});
    }
    c.tag = "longprefill";
    add(c);
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 32, 128, 8, 2, b16, e4m3);
    set_lengths(&c, {{640, 512}, {33, 1}});
    c.sliding_window = 128;
    c.tag = "longprefill";
    add(c);
  }

  // Many sequences in one batch (work partitioning across SMs / threads), a few skipped and a
  // few short prefill chunks among the decodes.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 8, 2, b16, b16);
    std::vector<std::pair<int, int>> seqs;
    const int n = quick ? 65 : 257;
    for (int i = 0; i < n; ++i) {
      const int len = 1 + (i * 53) % 300;
      const int q = i % 17 == 5 ? 0 : (i % 11 == 3 ? std::min(len, 3) : 1);
      seqs.push_back({len, q});
    }
    set_lengths(&c, seqs);
    c.tag = "manyseqs";
    add(c);
  }

  // GQA 64 (one KV head for 64 query heads: more query heads per KV head than one tile of rows).
  {
    CaseConfig c = base(dev, KVLayout::kHND, 16, 128, 64, 1, f16, f16);
    set_lengths(&c, {{300, 1}, {50, 10}, {17, 1}});
    c.tag = "gqa64";
    add(c);
  }

  // Head sizes the API accepts beyond the tested list (every multiple of 8 up to 256; vLLM's
  // prefix-prefill test uses 24), and a non-power-of-two block of Qwen3.5 (1056).
  {
    struct Odd {
      KVLayout layout;
      int head;
      DType dtype, kv;
    };
    const Odd odd[] = {{KVLayout::kSplit, 24, f16, f16},
                       {KVLayout::kNHD, 8, f32, f32},
                       {KVLayout::kHND, 16, b16, e4m3},
                       {KVLayout::kNHD, 248, b16, b16}};
    for (const Odd& o : odd) {
      if (quick && o.head != 24) continue;
      CaseConfig c = base(dev, o.layout, 16, o.head, 8, 2, o.dtype, o.kv);
      set_lengths(&c, {{40, 1}, {33, 5}, {1, 1}});
      c.tag = "oddhead";
      add(c);
    }
  }
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 1056, 128, 8, 2, b16, b16);
    set_lengths(&c, {{1057, 1}, {1055, 1}, {2113, 4}});
    c.extra_blocks = 1;
    c.tag = "bs1056";
    add(c);
  }

  // max_seq_len = 256k + 1 (one past a partition boundary).
  for (int bs : {16, 32}) {
    if (quick && bs == 32) continue;
    const DType dt = bs == 16 ? f16 : b16;
    CaseConfig c = base(dev, KVLayout::kNHD, bs, 128, 8, 2, dt, dt);
    set_lengths(&c, {{257, 1}, {513, 1}, {256, 1}, {512, 1}, {513, 17}});
    c.tag = "len257_513";
    add(c);
  }

  // Block size 2048 (hybrid Mamba models) with head 64/128/256: a tile sized from the block
  // would ask for far more shared memory than the device has.
  for (int d : {64, 128, 256}) {
    CaseConfig c = base(dev, KVLayout::kNHD, 2048, d, 8, 2, b16, b16);
    if (quick) {
      set_lengths(&c, {{2049, 1}, {2047, 1}});
    } else {
      set_lengths(&c, {{2047, 1}, {2049, 1}, {4097, 2}, {2048, 1}});
    }
    c.page_pad = d == 128 ? 64 : 0;  // W5: block 2048 with padded pages
    c.tag = "bs2048";
    add(c);
  }

  // Sequences longer than the plan saw (a decode CUDA graph replayed at later steps): the
  // split plan is made for the planned lengths, the run's metadata holds the real ones. Decode
  // only (the decode fast path: cluster merge / work list), a window with sinks in the split
  // layout, and fp8 with a prefill chunk (the tiled kernel on CUDA).
  {
    struct G {
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      std::vector<std::pair<int, int>> lens;
      std::vector<int> planned;
      int window;
    };
    const G gs[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, b16, {{3000, 1}, {700, 1}, {65, 1}, {20, 0}},
         {1024, 64, 65, 20}, 0},
        {KVLayout::kSplit, 32, 64, 16, 2, f16, f16, {{5000, 1}, {1, 1}, {300, 1}}, {200, 1, 299}, 100},
        {KVLayout::kHND, 16, 128, 32, 8, b16, e4m3, {{2000, 1}, {500, 40}}, {100, 500}, 0},
    };
    for (const G& g : gs) {
      CaseConfig c = base(dev, g.layout, g.block, g.head, g.heads, g.kv_heads, g.dt, g.kv);
      set_lengths(&c, g.lens);
      c.planned_seq_lens = g.planned;
      c.sliding_window = g.window;
      c.sinks = g.window > 0;
      if (is_fp8(g.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = "grown";
      add(c);
    }
  }

  // A pool much larger than needed: block ids spread far apart.
  {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 8, 2, f16, f16);
    set_lengths(&c, {{300, 1}, {120, 4}, {33, 1}});
    c.extra_blocks = quick ? 1000 : 3000;
    c.tag = "bigpool";
    add(c);
  }

  // CPU worker threads forced: one, and more threads than work items.
  for (int threads : {1, 7}) {
    if (quick && threads == 1) continue;
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 64, 4, 2, f32, f32);
    set_lengths(&c, {{40, 1}, {0, 0}, {20, 5}});
    c.plan.num_threads = threads;
    c.tag = "threads";
    add(c);
  }

  // Small softcap and sinks that dominate, MQA with long prefill chunks.
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kSplit, 32, 128, 16, 1, f32, f32);
    set_lengths(&c, {{200, 64}, {64, 1}, {90, 30}});
    c.softcap = 0.7f;
    c.sinks = true;
    c.tag = "mqaprefill";
    add(c);
  }

  // The names DESIGN.md uses as examples (§4, §7), so that `pagedattn verify --cases NAME` and
  // `--gtest_filter=*NAME` work as documented: a 544-token block, head 80, GQA 4, bf16, window
  // 64, with decode and prefill rows on both sides of the window edge and of a block boundary.
  for (const char* name : {"nhd_bs544_h80_q16kv4_bf16_window64", "nhd_bs544_h80_gqa4_bf16_window64"}) {
    CaseConfig c = base(dev, KVLayout::kNHD, 544, 80, 16, 4, b16, b16);
    set_lengths(&c, {{544, 1}, {545, 1}, {63, 1}, {64, 1}, {65, 1}, {600, 40}, {1100, 7}});
    c.sliding_window = 64;
    if (name[14] == 'g') {  // the gqa4 spelling: the same shape with 32/8 heads
      c.num_heads = 32;
      c.num_kv_heads = 8;
    }
    c.name = name;
    if (!quick) add(c);
  }

  // The CUDA decode fast path (all-decode batches, fp16/bf16, head 64/128, GQA <= 16): every
  // layout and block size it takes, each GQA packing, split counts from 1 to many (the merge),
  // windows whose start falls inside a 64-token tile, skipped sequences, padded pages (aligned:
  // the fast path; odd: the tiled fallback), and every feature. On the CPU these are ordinary
  // decode cases.
  {
    const DecodeCase ds[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0},
        {KVLayout::kHND, 16, 128, 32, 8, f16, 1, 0, 0},
        {KVLayout::kSplit, 16, 128, 32, 8, b16, 2, 0, 0},
        {KVLayout::kNHD, 1, 64, 16, 16, f16, 0, 0, 5},
        {KVLayout::kHND, 2048, 128, 64, 4, b16, 3, 64, 0},
        {KVLayout::kSplit, 544, 64, 8, 1, f16, 1, 0, 3},
        {KVLayout::kNHD, 544, 64, 40, 5, b16, 2, 8, 0},
        {KVLayout::kSplit, 32, 128, 16, 2, f16, 0, 24, 1},
        {KVLayout::kHND, 16, 64, 32, 8, b16, 0, 3, 0},  // odd pad: tiled fallback
        // Head 64 with 16 query columns (GQA 9-16): its own register budget (3 CTAs per SM
        // where GQA <= 8 runs 4), a group that fills neither 8 nor 16 columns, and 16 of 16.
        {KVLayout::kNHD, 16, 64, 24, 2, b16, 1, 0, 0},
        {KVLayout::kSplit, 16, 64, 16, 1, f16, 2, 0, 4},
    };
    int i = 0;
    for (const DecodeCase& d : ds) {
      ++i;
      if (quick && i % 2 == 0) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.dt);
      set_lengths(&c, {{3000, 1}, {1, 1}, {64, 1}, {20, 0}, {65, 1}, {700, 1}, {d.block + 1, 1}});
      set_decode_features(&c, d.feature, d.pad, d.splits);
      c.tag = "dmma" + std::to_string(i);
      add(c);
    }
    // More splits than the merge kernel folds in one batch (8 per thread: 64 splits for head
    // 128, 128 for head 64), so its running (max, sum) carries across batches, with a sink and
    // a split count that is not a multiple of its split groups.
    for (int head : {128, 64}) {
      CaseConfig c = base(dev, head == 128 ? KVLayout::kNHD : KVLayout::kHND, 16, head, 16, 4,
                          b16, b16);
      set_lengths(&c, {{9000, 1}, {130, 1}, {4100, 1}});
      c.sinks = true;
      c.softcap = 30.0f;
      c.plan.num_splits = 141;  // 64-token splits of the 9000-token sequence
      c.tag = "dmmamany";
      add(c);
    }
  }

  // A table of decode cases tagged <tag><index from 1>; `quick` keeps the listed indices;
  // `fault` sets a fault class on each.
  auto add_decode_table = [&](const auto& table, const char* tag, std::initializer_list<int> keep,
                              void (*fault)(CaseConfig*) = nullptr) {
    int i = 0;
    for (const DecodeCase& d : table) {
      ++i;
      if (quick && std::find(keep.begin(), keep.end(), i) == keep.end()) continue;
      CaseConfig c = base(dev, d.layout, d.block, d.head, d.heads, d.kv_heads, d.dt, d.dt);
      set_lengths(&c, d.lens);
      c.planned_seq_lens = d.planned;
      set_decode_features(&c, d.feature, d.pad, d.splits);
      if (fault) fault(&c);
      c.tag = tag + std::to_string(i);
      add(c);
    }
  };

  // The tiled kernel with its split merge: split layout, fp32, head 96, 12/4 heads, a long
  // decode row and a short prefill chunk, 3 forced splits (each fault class below runs it).
  auto tiled_three_splits = [&](const char* tag) {
    CaseConfig c = base(dev, KVLayout::kSplit, 16, 96, 12, 4, f32, f32);
    set_lengths(&c, {{400, 1}, {70, 9}});
    c.plan.num_splits = 3;
    c.tag = tag;
    return c;
  };

  // The small-call kernel (src/cuda/decode/decode_small.cu): one-wave cluster calls on nhd/hnd caches
  // whose splits are at most 128 tokens (8 warps, one tile of 16 or 8 tokens each). Cluster
  // sizes 2-8, among them 3, 5, 6 and 7 (uneven output shares per CTA), GQA 1 (MQA per head),
  // 3 and 12 (odd head pairs), 8 and 16 (full columns), head 64 and 128, blocks 1 to 2048 with
  // padded pages, every feature, splits a short sequence lacks, a window whose start leaves
  // whole splits empty, skipped sequences, and sequences longer than the plan (a replayed
  // graph: the last split loops over many tiles). On the CPU these are ordinary decode cases.
  {
    const DecodeCase ss[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},  // W7
        {KVLayout::kHND, 16, 128, 16, 2, f16, 1, 0, 3, {{300, 1}, {1, 1}, {20, 0}, {130, 1}}, {}},
        {KVLayout::kNHD, 1, 64, 8, 8, b16, 2, 0, 5, {{600, 1}, {64, 1}}, {}},
        {KVLayout::kHND, 2048, 128, 64, 4, b16, 3, 64, 7, {{800, 1}, {5, 1}}, {}},
        {KVLayout::kNHD, 544, 64, 40, 5, f16, 1, 8, 2, {{200, 1}, {129, 1}, {20, 0}}, {}},
        {KVLayout::kNHD, 16, 128, 24, 2, b16, 0, 0, 4, {{512, 1}, {17, 1}}, {}},
        {KVLayout::kHND, 32, 64, 24, 8, b16, 1, 0, 6, {{700, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 1, 0, 8, {{500, 1}}, {}},  // 64-token splits
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 1, 0, 0, {{3000, 1}}, {1024}},
        {KVLayout::kHND, 544, 64, 32, 2, f16, 3, 0, 0, {{2500, 1}, {90, 1}}, {700, 90}},
        // Head 64 with 8 splits: 8 output units, one per CTA (one sequence: with more, 8
        // splits make a work-list call).
        {KVLayout::kNHD, 16, 64, 16, 2, f16, 1, 0, 0, {{1024, 1}}, {}},
    };
    // The sanitizer subset: W7, GQA 16 with a 2048-token block, and a replay past the plan.
    add_decode_table(ss, "dsmall", {1, 4, 9});
  }

  // Head 64 with KV heads paired (decode_mma_pairs_heads: nhd, head strides of 64 elements,
  // an even number of KV heads, GQA <= 4): two KV heads per CTA through the head-128 pipeline
  // with a block-diagonal query. Every merge mode of the pipelined kernel (on an H200: the work
  // list, the cluster merge, one split with a direct store, a single sequence's splits through
  // the merge kernel), GQA 1-4, padded pages (strided access, heads still adjacent: the plan
  // pairs where select_kernel could not know it would), blocks 1 to 2048, every feature (a
  // window only with one forced split: windows of 100 tokens make small calls, which stay
  // unpaired), skipped sequences and a mixed batch (a prefill chunk beside the paired decode
  // rows). test_decode_select.cpp checks that each of these plans paired. On the CPU these are
  // ordinary decode cases.
  {
    const std::vector<std::pair<int, int>> dl = {{3000, 1}, {1, 1},   {64, 1}, {20, 0},
                                                 {65, 1},   {700, 1}, {17, 1}};
    const DecodeCase ps[] = {
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, dl, {}},                        // work list
        {KVLayout::kNHD, 1, 64, 16, 8, f16, 1, 0, 3, {{900, 1}, {300, 1}, {1, 1}}, {}},  // cluster
        {KVLayout::kNHD, 2048, 64, 12, 4, b16, 1, 64, 0, {{5000, 1}, {3, 1}, {2100, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 8, 8, b16, 2, 0, 1, dl, {}},  // one split: direct store
        {KVLayout::kNHD, 32, 64, 32, 8, f16, 1, 0, 12, {{3000, 1}, {130, 1}, {20, 0}, {1500, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 24, 8, b16, 1, 0, 0, {{3000, 1}}, {}},  // the merge kernel
        {KVLayout::kNHD, 16, 64, 8, 2, b16, 1, 8, 0, {{3000, 1}, {40, 7}, {700, 1}}, {}},  // mixed
    };
    add_decode_table(ps, "dpair", {1, 2, 6});
  }

  // An upstream NaN in the query (CaseConfig::nan_query) through every kernel: on an H200 the
  // small-call kernel (W7's shape), the pipelined kernel with one split (direct store), with a
  // cluster merge and with the merge kernel (one long sequence, many forced splits), head-64
  // pairs, the prefill kernel (query chunks, no sink: a sink starts the running maximum at a
  // number), the tiled kernel with its split merge (head 96, fp32 queries), and sinks, which
  // join the denominator that NaN must still reach. The rows' scores are all NaN, so a kernel
  // that skips a row whose running maximum is still -inf writes 0 and -inf there instead of
  // NaN. On the CPU these are ordinary cases too.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 1, 0, 1, {{3000, 1}, {1, 1}, {20, 0}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 1, 0, 70, {{9000, 1}}, {}},
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 2, 0, 0, {{300, 40}, {50, 50}, {33, 1}}, {}},
    };
    add_decode_table(ns, "nan", {1, 3, 5}, [](CaseConfig* c) { c->nan_query = true; });
    CaseConfig c = tiled_three_splits("nan7");
    c.sinks = true;
    c.nan_query = true;
    add(c);
  }
  // No finite logit (CaseConfig::neg_inf_keys): the rows of KV head 0 have only -inf logits.
  // The same kernels and merges; every path must give NaN (0/0) where it used to give 0 and
  // -inf on some paths and NaN on others, and the sink's own softmax with a sink.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 0, 0, 0, {{1024, 1}}, {}},             // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 0, 0, 1, {{3000, 1}, {1, 1}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},              // cluster, sinks
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 0, 0, 70, {{9000, 1}}, {}},            // merge kernel
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 0, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},  // pairs
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 2, 0, 0, {{300, 40}, {50, 50}, {33, 1}}, {}},  // prefill
    };
    // The sanitizer subset: the small-call kernel and (below) the tiled kernel.
    add_decode_table(ns, "ninf", {1}, [](CaseConfig* c) { c->neg_inf_keys = true; });
    CaseConfig c = tiled_three_splits("ninf7");
    c.neg_inf_keys = true;
    add(c);
  }

  // A sink of -inf (CaseConfig::neg_inf_sinks: the even query heads have none) through every
  // kernel with a window: a -inf sink must weigh nothing. The tiled kernel puts the sink in
  // split 0 only; with a window, split 0 of a long decode row can hold none of its keys
  // (ninfsink7: 3 forced splits of 192 keys, the row sees [336, 400)), and a running sum started
  // at 1 for the -inf sink then gives that empty split the weight of a logit 0 in the merge.
  // The prefill kernel starts the running sum at 1 too and keeps it while the row's maximum
  // stays -inf: with only -inf logits (neg_inf_keys) it wrote output 0 and LSE 0 where the
  // oracle has 0/0 = NaN (ninfsink6). The decode kernels: small-call, one split, cluster merge,
  // merge kernel, head-64 rows. On the CPU these are ordinary sink cases.
  {
    const DecodeCase ns[] = {
        {KVLayout::kNHD, 16, 128, 32, 8, b16, 3, 0, 0, {{1024, 1}}, {}},             // small-call
        {KVLayout::kNHD, 16, 128, 32, 8, f16, 3, 0, 1, {{3000, 1}, {1, 1}, {700, 1}}, {}},
        {KVLayout::kHND, 16, 128, 16, 4, b16, 3, 0, 4, {{900, 1}}, {}},              // cluster
        {KVLayout::kNHD, 16, 128, 16, 4, b16, 3, 0, 70, {{9000, 1}}, {}},            // merge kernel
        {KVLayout::kNHD, 16, 64, 32, 8, b16, 3, 0, 0, {{3000, 1}, {64, 1}, {17, 1}}, {}},
    };
    // The sanitizer subset: the tiled kernel's empty split 0 (ninfsink7 below) only.
    add_decode_table(ns, "ninfsink", {}, [](CaseConfig* c) { c->neg_inf_sinks = true; });
    CaseConfig pf = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&pf, {{300, 40}, {50, 50}, {33, 1}});
    set_decode_features(&pf, 3, 0, 0);
    pf.neg_inf_sinks = true;
    pf.neg_inf_keys = true;
    pf.tag = "ninfsink6";
    if (!quick) add(pf);
    CaseConfig c = tiled_three_splits("ninfsink7");
    c.sliding_window = 64;
    c.sinks = true;
    c.neg_inf_sinks = true;
    add(c);
    c.neg_inf_keys = true;
    c.tag = "ninfsink8";
    if (!quick) add(c);
  }

  // The largest window (INT32_MAX, which covers every sequence: no window in effect) on the
  // decode fast path (its split cut added a tile to the window in int and wrapped negative:
  // a negative split size), a mixed batch (decode rows beside the prefill kernel) and the
  // tiled kernel with forced splits.
  if (!quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&c, {{3000, 1}, {1, 1}, {700, 1}});
    c.sliding_window = std::numeric_limits<std::int32_t>::max();
    c.sinks = true;
    c.tag = "winmax1";
    add(c);
    set_lengths(&c, {{300, 40}, {50, 50}, {33, 1}});
    c.tag = "winmax2";
    add(c);
    c = tiled_three_splits("winmax3");
    c.sliding_window = std::numeric_limits<std::int32_t>::max();
    add(c);
  }

  // Kernel boundaries the CPU cannot show (a review of the CUDA kernels; tags edge<kernel><i>,
  // so `--cases '*_edge*'` runs them all). On the CPU they are ordinary cases; on an H200 each
  // reaches the kernel named below (the host rules decode_mma_config, prefill_mma_supported
  // and tiled_choose route them there).
  //  - edgepf: the tensor-core prefill kernel (prefill_mma.cu). GQA ratios that do not divide
  //    its 64 rows (5, 3, 6, 7, 48: a row tile then starts inside a token's head group, rem > 0,
  //    and a warp's 16 rows span several tokens), a group wider than a whole row tile (80 heads
  //    of one KV head: a token's rows cross two CTAs), a tile with a single valid row (13 x 5 =
  //    65 rows), windows whose start falls inside a block, a 64-token tile and, for the split
  //    layout, an 8-token value chunk (ld_lo < kv_lo), blocks of 8 (one value chunk per block)
  //    and 24 (a multiple of 8 that does not divide 64), a chunk crossing a 2048-token block.
  //    Decode rows of GQA > 16 run on the prefill kernel too (min_query_len 1).
  //  - edgedec: the decode fast path (decode_mma.cu, decode_small.cu). The pipelined kernel
  //    unpaired with block 1 (cursor step 64 blocks), blocks 48 and 24 (a tile advances whole
  //    blocks plus a remainder: the cursor's carry), block 8 in the split layout, windows whose
  //    start lands on, just before and just after a 64-token tile edge, window 1; cluster
  //    merges of 2, 4 and 7 splits (7 splits of head 64, GQA 1: the last CTA combines no
  //    output element, only LSEs); the small-call kernel with 5 and 7 splits (uneven units per
  //    CTA) and GQA 5 and 10 (a partly padded head quad).
  //  - edgetl: the tiled kernel (attention_kernel.cuh). fp8 with head 8 (8-byte copies, a key
  //    row shorter than one 16-byte QK chunk: zeroed tail) and head 40 with odd padding
  //    (element-wise fp8 copies); heads 136 and 200 (not multiples of 16; 3 and 4 dim pairs
  //    per lane) with a 7-token block, a 5-token tile (tile_rows 8) and forced splits; a 33-token
  //    tile on the split layout; GQA 48 with head 256 (two head groups of 32 rows, the second
  //    half empty).
  if (!quick) {
    struct Edge {
      const char* tag;
      KVLayout layout;
      int block, head, heads, kv_heads;
      DType dt, kv;
      int window;
      int feature;  // 0 none, 1 softcap + ALiBi + sinks, 2 ALiBi + sinks, 3 softcap
      std::int64_t pad;
      int splits, tile;
      std::vector<std::pair<int, int>> lens;
    };
    const KVLayout nhd = KVLayout::kNHD, hnd = KVLayout::kHND, spl = KVLayout::kSplit;
    const std::vector<std::pair<int, int>> win64 = {{64, 1}, {65, 1}, {128, 1}, {129, 1},
                                                    {127, 1}, {1000, 1}, {1025, 1}, {20, 0}};
    const Edge es[] = {
        // ---- prefill kernel
        {"edgepf1", nhd, 16, 128, 20, 4, b16, b16, 0, 2, 0, 0, 0,
         {{300, 40}, {77, 13}, {64, 1}, {20, 0}, {130, 64}}},
        {"edgepf2", hnd, 16, 128, 20, 4, f16, f16, 43, 3, 0, 0, 0,
         {{300, 40}, {77, 13}, {64, 1}, {130, 64}}},
        {"edgepf3", spl, 16, 128, 48, 1, f16, f16, 37, 2, 0, 0, 0, {{200, 21}, {45, 45}, {9, 1}}},
        {"edgepf4", nhd, 16, 64, 80, 1, b16, b16, 0, 2, 0, 0, 0,
         {{100, 7}, {65, 1}, {1, 1}, {40, 0}, {33, 3}}},
        {"edgepf5", hnd, 32, 64, 24, 8, f16, f16, 0, 3, 0, 0, 0, {{150, 70}, {5, 5}, {64, 1}}},
        {"edgepf6", spl, 24, 64, 12, 2, b16, b16, 45, 0, 0, 0, 0, {{500, 100}, {90, 11}, {49, 1}}},
        {"edgepf7", spl, 8, 128, 16, 2, b16, b16, 20, 1, 0, 0, 0, {{130, 30}, {17, 17}, {8, 1}}},
        {"edgepf8", nhd, 2048, 64, 7, 1, f16, f16, 1000, 0, 64, 0, 0, {{2100, 40}, {2050, 1}}},
        // ---- decode fast path
        {"edgedec1", hnd, 1, 128, 32, 4, b16, b16, 0, 0, 0, 0, 0,
         {{700, 1}, {1, 1}, {65, 1}, {20, 0}, {130, 1}}},
        {"edgedec2", nhd, 48, 128, 24, 2, f16, f16, 0, 1, 0, 0, 0,
         {{1000, 1}, {48, 1}, {49, 1}, {47, 1}, {20, 0}}},
        {"edgedec3", spl, 24, 128, 16, 4, b16, b16, 64, 0, 0, 0, 0, win64},
        {"edgedec4", spl, 8, 64, 8, 2, f16, f16, 0, 2, 0, 3, 0, {{300, 1}, {8, 1}, {9, 1}, {7, 1}}},
        {"edgedec5", nhd, 16, 128, 32, 8, b16, b16, 64, 2, 0, 2, 0, win64},
        {"edgedec6", nhd, 16, 64, 30, 3, f16, f16, 0, 0, 0, 7, 0, {{800, 1}}},
        {"edgedec7", nhd, 16, 128, 20, 4, b16, b16, 0, 1, 0, 5, 0, {{600, 1}, {90, 1}}},
        {"edgedec8", hnd, 16, 64, 8, 8, f16, f16, 0, 0, 0, 7, 0, {{3000, 1}, {1, 1}}},
        {"edgedec9", nhd, 16, 128, 32, 8, f16, f16, 0, 2, 0, 2, 0, {{2000, 1}, {1500, 1}}},
        {"edgedec10", spl, 16, 128, 32, 2, b16, b16, 0, 1, 0, 4, 0, {{1100, 1}, {3, 1}}},
        {"edgedec11", nhd, 16, 128, 32, 8, b16, b16, 1, 2, 0, 0, 0,
         {{1, 1}, {64, 1}, {65, 1}, {1000, 1}, {20, 0}}},
        // ---- tiled kernel
        {"edgetl1", nhd, 16, 8, 8, 2, f16, e4m3, 0, 0, 0, 0, 0, {{40, 1}, {33, 5}, {1, 1}}},
        {"edgetl2", hnd, 16, 40, 10, 2, b16, e5m2, 20, 2, 3, 0, 0, {{70, 1}, {50, 9}}},
        {"edgetl3", nhd, 7, 136, 10, 2, f32, f32, 0, 1, 0, 3, 0, {{200, 1}, {70, 9}, {7, 1}}},
        {"edgetl4", hnd, 7, 200, 8, 2, f16, f16, 0, 3, 0, 0, 5, {{60, 1}, {33, 6}, {5, 1}}},
        {"edgetl5", spl, 16, 72, 8, 2, f32, f32, 30, 0, 0, 0, 33, {{100, 1}, {70, 12}}},
        {"edgetl6", nhd, 16, 256, 48, 1, b16, b16, 0, 2, 0, 0, 0, {{90, 1}, {40, 3}, {1, 1}}},
    };
    for (const Edge& e : es) {
      CaseConfig c = base(dev, e.layout, e.block, e.head, e.heads, e.kv_heads, e.dt, e.kv);
      set_lengths(&c, e.lens);
      c.sliding_window = e.window;
      c.softcap = e.feature == 1 || e.feature == 3 ? 30.0f : 0.0f;
      c.alibi = e.feature == 1 || e.feature == 2;
      c.sinks = e.feature == 1 || e.feature == 2;
      c.page_pad = e.pad;
      c.plan.num_splits = e.splits;
      c.plan.tile_tokens = e.tile;
      if (is_fp8(e.kv)) {
        c.k_scale = 0.5f;
        c.v_scale = 0.25f;
      }
      c.tag = e.tag;
      add(c);
    }
  }

  // Heavy cases for the GPU only (DESIGN.md §4: run without the sanitizer).
  if (dev.type == DeviceType::kCUDA && !quick) {
    CaseConfig c = base(dev, KVLayout::kNHD, 16, 128, 32, 8, b16, b16);
    set_lengths(&c, {{131072, 1}, {4097, 1}});
    c.tag = "len131072";
    add(c);
    // Block ids times the block stride past 2^31 elements: 16 * 8 * 128 = 16384 elements per
    // block, so ids above 131072 address beyond int32.
    CaseConfig big = base(dev, KVLayout::kNHD, 16, 128, 8, 8, f16, f16);
    set_lengths(&big, {{1000, 1}, {600, 8}, {17, 1}});
    big.extra_blocks = 140000;
    big.tag = "idx2e31";
    add(big);
  }
}

}  // namespace

std::vector<CaseConfig> matrix_cases(Device device, bool quick) {
  std::vector<CaseConfig> cases;
  auto valid = [](const std::vector<int>& row) {
    // Axis order: layout, head, block, heads, dtype, kv, feature, pad, profile.
    if (row[0] < 0 || row[1] < 0 || row[5] < 0) return true;
    const DType kv = row[5] == 0 ? DType::kFloat16 : kKVTypes[row[5]];
    return split_ok(kLayouts[row[0]], kv, kHeadSizes[row[1]]);
  };
  auto make = [&](int layout, int head, int block, int heads, int dtype, int kv, int feature,
                  int pad, int profile, std::size_t index) {
    const DType dt = kDTypes[dtype];
    const DType kvd = kv == 0 ? dt : kKVTypes[kv];
    CaseConfig c = base(device, kLayouts[layout], kBlockSizes[block], kHeadSizes[head],
                        kHeads[heads].first, kHeads[heads].second, dt, kvd);
    set_lengths(&c, profile_lengths(static_cast<Profile>(profile), c.block_size, c.num_heads,
                                    c.num_kv_heads, c.head_size));
    apply_feature(&c, feature);
    c.page_pad = pad ? kMatrixPagePad : 0;
    c.extra_blocks = matrix_extra_blocks(c.block_size);
    if (is_fp8(kvd)) {
      // vLLM's test scales (k 0.5, v 0.25): stored values up to 2 and 4, well inside fp8.
      c.k_scale = 0.5f;
      c.v_scale = 0.25f;
    }
    c.slot_dtype = index % 2 ? DType::kInt32 : DType::kInt64;
    c.tag = kProfileNames[profile];
    return finish(c);
  };

  if (!quick) {
    const std::vector<int> sizes = {3, 9, 5, 5, 3, 3, kNumFeatures, 2, kNumProfiles};
    const auto rows = pairwise_rows(sizes, valid);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const auto& r = rows[i];
      cases.push_back(make(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8], i));
    }
  } else {
    // Every layout x dtype x kv dtype once, the other axes rotated so that every head size,
    // block size, GQA ratio, feature, padding and profile appears; sizes small for the
    // sanitizer (long = the decode profile of a 2048 block at most).
    std::size_t i = 0;
    for (int l = 0; l < 3; ++l)
      for (int d = 0; d < 3; ++d)
        for (int k = 0; k < 3; ++k, ++i) {
          int head = static_cast<int>(i % 9);
          const DType kv = k == 0 ? kDTypes[d] : kKVTypes[k];
          while (!split_ok(kLayouts[l], kv, kHeadSizes[head])) head = (head + 1) % 9;
          const int profile = static_cast<int>(i % 2);  // decode, prefill
          cases.push_back(make(l, head, static_cast<int>(i % 5), static_cast<int>((i / 3) % 5), d,
                               k, static_cast<int>(i % kNumFeatures), static_cast<int>((i / 2) % 2),
                               profile, i));
        }
  }
  add_named_cases(device, quick, &cases);
  return cases;
}

}  // namespace pagedattn::testing
