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

#include "src/testing/case_builders.h"
#include "src/testing/cases_models.h"
#include "src/testing/harness.h"

namespace pagedattn::testing {

using namespace detail;  // the case building blocks (case_builders.h)

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

const char* to_string(ScaleMode mode) {
  switch (mode) {
    case ScaleMode::kHost: return "host";
    case ScaleMode::kTensor: return "tensor";
    case ScaleMode::kPerHead: return "per-head";
  }
  return "unknown";
}

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
  if (is_fp8(c.kv_dtype) && c.scales == ScaleMode::kTensor) n += "_scaletensor";
  if (is_fp8(c.kv_dtype) && c.scales == ScaleMode::kPerHead) n += "_scaleperhead";
  if (c.plan.batch_invariant) n += "_invariant";
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

}  // namespace

namespace detail {

void set_lengths(CaseConfig* c, const std::vector<std::pair<int, int>>& seqs) {
  c->seq_lens.clear();
  c->query_lens.clear();
  for (const auto& [s, q] : seqs) {
    c->seq_lens.push_back(s);
    c->query_lens.push_back(q);
  }
}

}  // namespace detail

namespace {

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

}  // namespace

namespace detail {

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

}  // namespace detail


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
  add_long_context_cases(device, quick, &cases);
  add_model_cases(device, quick, &cases);
  return cases;
}

}  // namespace pagedattn::testing
