// GPU writer vs the writer oracle (reference_write_kv), bit for bit over the whole cache, for
// every layout x dtype x fp8 kind, dense and padded pages (aligned and odd padding, which
// forces the strided writer), block sizes 5 and 16, int32 and int64 slot mappings. Caches start
// as a canary pattern and sit between guard regions that must stay intact; negative slots and
// key rows past slot_mapping's length (CUDA-graph padding, filled with NaN) must not be written.
// Suite names start with "Sanitize" so that the compute-sanitizer run covers both writers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

constexpr std::size_t kGuard = 256;
constexpr std::uint8_t kGuardByte = 0xC3;
constexpr std::uint8_t kCanary = 0x5C;

struct WriterCase {
  KVLayout layout;
  DType src;
  DType cache;
  std::int64_t pad;
  int block_size;
  int head_size;
  DType slot_dtype;
  std::string name;
};

std::vector<WriterCase> writer_cases() {
  const std::pair<DType, DType> types[] = {
      {DType::kFloat32, DType::kFloat32},     {DType::kFloat16, DType::kFloat16},
      {DType::kBFloat16, DType::kBFloat16},   {DType::kFloat32, DType::kFloat8E4M3},
      {DType::kFloat16, DType::kFloat8E4M3},  {DType::kBFloat16, DType::kFloat8E4M3},
      {DType::kFloat32, DType::kFloat8E5M2},  {DType::kFloat16, DType::kFloat8E5M2},
      {DType::kBFloat16, DType::kFloat8E5M2}};
  std::vector<WriterCase> out;
  int i = 0;
  for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND})
    for (const auto& [src, cache] : types)
      for (std::int64_t pad : {std::int64_t{0}, std::int64_t{3}, std::int64_t{16}}) {
        WriterCase c{l, src, cache, pad, i % 2 ? 5 : 16,
                     (l != KVLayout::kSplit && i % 3 == 0) ? 40 : 96,
                     i % 2 ? DType::kInt32 : DType::kInt64, ""};
        std::ostringstream n;
        n << to_string(l) << "_" << to_string(src) << "_to_" << to_string(cache) << "_pad" << pad
          << "_bs" << c.block_size << "_h" << c.head_size << "_" << to_string(c.slot_dtype);
        c.name = n.str();
        ++i;
        out.push_back(c);
      }
  return out;
}

struct WriterSetup {
  KVCacheSpec spec;
  std::size_t cache_bytes = 0;
  std::vector<std::uint8_t> kv_src;    // [rows + 3, 2, KVH, D] in src dtype
  std::int64_t rows = 0;               // slot_mapping length
  std::vector<std::int64_t> slots;     // may contain negatives / out-of-range
  float k_scale = 1, v_scale = 1;
};

WriterSetup make_setup(const WriterCase& c, std::uint64_t seed, std::int64_t num_blocks) {
  WriterSetup w;
  w.spec.layout = c.layout;
  w.spec.num_blocks = num_blocks;
  w.spec.block_size = c.block_size;
  w.spec.num_kv_heads = 3;
  w.spec.head_size = c.head_size;
  w.spec.dtype = c.cache;
  w.spec.page_pad = c.pad;
  w.cache_bytes = static_cast<std::size_t>(kv_cache_elements(w.spec).value()) * dtype_size(c.cache);
  if (is_fp8(c.cache)) {
    w.k_scale = 0.05f;  // |x| <= 1 -> up to 20: inside fp8 range, rounding exercised
    w.v_scale = 0.002f;  // up to 500: saturates e4m3 (max 448) for |x| > 0.896
  }
  Rng rng(seed);
  const std::int64_t num_slots = num_blocks * c.block_size;
  std::vector<std::int64_t> perm(static_cast<std::size_t>(num_slots));
  for (std::int64_t i = 0; i < num_slots; ++i) perm[i] = i;
  for (std::int64_t i = num_slots - 1; i > 0; --i) std::swap(perm[i], perm[rng.below(i + 1)]);
  const std::int64_t used = num_slots * 2 / 3;
  w.slots.assign(perm.begin(), perm.begin() + used);
  // padding slots (skip) at random places
  for (std::int64_t neg : {std::int64_t{-1}, std::int64_t{-5}, std::int64_t{-1}})
    w.slots.insert(w.slots.begin() + static_cast<std::ptrdiff_t>(rng.below(w.slots.size() + 1)), neg);
  w.rows = static_cast<std::int64_t>(w.slots.size());
  const std::int64_t KVH = 3, D = c.head_size;
  const std::size_t es = dtype_size(c.src);
  w.kv_src.assign(static_cast<std::size_t>((w.rows + 3) * 2 * KVH * D) * es, 0xFF);  // NaN rows past the end
  for (std::int64_t i = 0; i < w.rows * 2 * KVH * D; ++i)
    numeric::store_from_float(w.kv_src.data(), c.src, i, rng.uniform(-1.0f, 1.0f));
  return w;
}

std::vector<std::uint8_t> slot_bytes(const std::vector<std::int64_t>& slots, DType dt) {
  std::vector<std::uint8_t> b;
  if (dt == DType::kInt64) {
    b.resize(slots.size() * 8);
    std::memcpy(b.data(), slots.data(), b.size());
  } else {
    std::vector<std::int32_t> v(slots.begin(), slots.end());
    b.resize(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
  }
  return b;
}

std::string first_diff(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       std::size_t es, const char* what) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != want[i]) {
      std::ostringstream os;
      os << what << ": element " << i / es << " byte " << i % es << " is 0x" << std::hex
         << int(got[i]) << ", the writer oracle has 0x" << int(want[i]);
      return os.str();
    }
  return std::string();
}

/// Write through the public API on the GPU and through the oracle on the host, compare.
/// `host_validate`: pass the host copy of the slot mapping (validation); otherwise the device
/// kernel alone must skip what it cannot write (`oracle_slots` then excludes those slots).
void run_writer_case(const WriterCase& c, const WriterSetup& w, bool host_validate,
                     const std::vector<std::int64_t>& oracle_slots) {
  const Device dev = Device::cuda(0);
  const std::int64_t KVH = w.spec.num_kv_heads, D = w.spec.head_size;
  // device caches with guards
  std::vector<std::uint8_t> full(w.cache_bytes + 2 * kGuard, kGuardByte);
  std::fill(full.begin() + kGuard, full.end() - kGuard, kCanary);
  DeviceMem kmem, vmem, src, slots;
  PA_ASSERT_OK(kmem.alloc(full.size()));
  PA_ASSERT_OK(vmem.alloc(full.size()));
  PA_ASSERT_OK(kmem.upload(full));
  PA_ASSERT_OK(vmem.upload(full));
  PA_ASSERT_OK(src.alloc(w.kv_src.size()));
  PA_ASSERT_OK(src.upload(w.kv_src));
  const std::vector<std::uint8_t> sb = slot_bytes(w.slots, c.slot_dtype);
  PA_ASSERT_OK(slots.alloc(sb.size()));
  PA_ASSERT_OK(slots.upload(sb));

  auto cache = make_kv_cache(w.spec, kmem.at(kGuard), vmem.at(kGuard), dev, w.k_scale, w.v_scale);
  ASSERT_TRUE(cache.ok()) << cache.status().to_string();
  const std::size_t es = dtype_size(c.src);
  const std::int64_t row = 2 * KVH * D;
  const TensorView key = TensorView::strided(src.get(), c.src, {w.rows + 3, KVH, D}, {row, D, 1}, dev);
  const TensorView value = TensorView::strided(src.at(KVH * D * es), c.src, {w.rows + 3, KVH, D},
                                               {row, D, 1}, dev);
  const TensorView sm = TensorView::contiguous(slots.get(), c.slot_dtype, {w.rows}, dev);
  WriteKVOptions opts;
  if (host_validate)
    opts.host_slot_mapping =
        TensorView::contiguous(const_cast<std::uint8_t*>(sb.data()), c.slot_dtype, {w.rows});
  PA_ASSERT_OK(write_kv(key, value, sm, *cache, nullptr, opts));
  PA_ASSERT_OK(cuda::device_synchronize());

  // oracle
  std::vector<std::uint8_t> rk(w.cache_bytes, kCanary), rv(w.cache_bytes, kCanary);
  auto rc = make_kv_cache(w.spec, rk.data(), rv.data(), Device::cpu(), w.k_scale, w.v_scale);
  ASSERT_TRUE(rc.ok());
  {
    // oracle rows: the same source rows; slots that the device must skip are marked -1
    const std::vector<std::int64_t>& os = oracle_slots;
    const TensorView hk = TensorView::strided(const_cast<std::uint8_t*>(w.kv_src.data()), c.src,
                                              {w.rows + 3, KVH, D}, {row, D, 1});
    const TensorView hv = TensorView::strided(const_cast<std::uint8_t*>(w.kv_src.data()) + KVH * D * es,
                                              c.src, {w.rows + 3, KVH, D}, {row, D, 1});
    const TensorView hs = TensorView::contiguous(const_cast<std::int64_t*>(os.data()), DType::kInt64,
                                                 {static_cast<std::int64_t>(os.size())});
    PA_ASSERT_OK(reference_write_kv(hk, hv, hs, *rc));
  }
  const std::vector<std::uint8_t> gk = kmem.bytes(), gv = vmem.bytes();
  for (std::size_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(gk[i], kGuardByte) << "key guard before the cache, byte " << i;
    ASSERT_EQ(gk[gk.size() - 1 - i], kGuardByte) << "key guard after the cache, byte " << i;
    ASSERT_EQ(gv[i], kGuardByte) << "value guard before the cache, byte " << i;
    ASSERT_EQ(gv[gv.size() - 1 - i], kGuardByte) << "value guard after the cache, byte " << i;
  }
  const std::vector<std::uint8_t> k_payload(gk.begin() + kGuard, gk.end() - kGuard);
  const std::vector<std::uint8_t> v_payload(gv.begin() + kGuard, gv.end() - kGuard);
  const std::size_t ces = dtype_size(c.cache);
  EXPECT_EQ(first_diff(k_payload, rk, ces, "key_cache"), "") << c.name;
  EXPECT_EQ(first_diff(v_payload, rv, ces, "value_cache"), "") << c.name;
}

void PrintTo(const WriterCase& c, std::ostream* os) { *os << c.name; }

class SanitizeWriter : public ::testing::TestWithParam<WriterCase> {};

TEST_P(SanitizeWriter, BitwiseEqualToWriterOracle) {
  PA_SKIP_WITHOUT_GPU();
  const WriterCase& c = GetParam();
  const WriterSetup w = make_setup(c, 11, 7);
  run_writer_case(c, w, /*host_validate=*/true, w.slots);
}

INSTANTIATE_TEST_SUITE_P(Sanitize, SanitizeWriter, ::testing::ValuesIn(writer_cases()),
                         [](const ::testing::TestParamInfo<WriterCase>& info) { return info.param.name; });

// Without a host copy of the slot mapping nothing validates the values: the kernels must skip
// slots past the cache (memory safety) and still write every valid one.
TEST(SanitizeWriterEdges, OutOfRangeSlotsSkippedWithoutHostCopy) {
  PA_SKIP_WITHOUT_GPU();
  for (KVLayout l : {KVLayout::kSplit, KVLayout::kNHD}) {
    WriterCase c{l, DType::kBFloat16, DType::kBFloat16, 0, 16, 64, DType::kInt64, "oob"};
    WriterSetup w = make_setup(c, 5, 4);
    const std::int64_t num_slots = 4 * 16;
    std::vector<std::int64_t> oracle = w.slots;
    // replace three slots with out-of-range values (just past the end, far past, 2^40)
    const std::int64_t bad[] = {num_slots, num_slots + 1000, std::int64_t{1} << 40};
    for (int i = 0; i < 3; ++i) {
      const std::size_t at = static_cast<std::size_t>(3 + 7 * i);
      w.slots[at] = bad[i];
      oracle[at] = -1;
    }
    run_writer_case(c, w, /*host_validate=*/false, oracle);
  }
}

// With the host copy, an out-of-range slot is an error and nothing is written.
TEST(SanitizeWriterEdges, OutOfRangeSlotRejectedWithHostCopy) {
  PA_SKIP_WITHOUT_GPU();
  const WriterCase c{KVLayout::kNHD, DType::kFloat16, DType::kFloat16, 0, 16, 64, DType::kInt32, "rej"};
  WriterSetup w = make_setup(c, 3, 2);
  w.slots[1] = 2 * 16;  // == num_slots
  const Device dev = Device::cuda(0);
  DeviceMem kmem, vmem, src, slots;
  PA_ASSERT_OK(kmem.alloc(w.cache_bytes));
  PA_ASSERT_OK(vmem.alloc(w.cache_bytes));
  PA_ASSERT_OK(cuda::testsupport::memset_device(kmem.get(), kCanary, w.cache_bytes));
  PA_ASSERT_OK(cuda::testsupport::memset_device(vmem.get(), kCanary, w.cache_bytes));
  PA_ASSERT_OK(src.alloc(w.kv_src.size()));
  PA_ASSERT_OK(src.upload(w.kv_src));
  const std::vector<std::uint8_t> sb = slot_bytes(w.slots, c.slot_dtype);
  PA_ASSERT_OK(slots.alloc(sb.size()));
  PA_ASSERT_OK(slots.upload(sb));
  auto cache = make_kv_cache(w.spec, kmem.get(), vmem.get(), dev);
  ASSERT_TRUE(cache.ok());
  const std::int64_t D = 64, KVH = 3;
  const TensorView key = TensorView::strided(src.get(), c.src, {w.rows + 3, KVH, D}, {2 * KVH * D, D, 1}, dev);
  const TensorView value = TensorView::strided(src.at(KVH * D * 2), c.src, {w.rows + 3, KVH, D},
                                               {2 * KVH * D, D, 1}, dev);
  WriteKVOptions opts;
  opts.host_slot_mapping =
      TensorView::contiguous(const_cast<std::uint8_t*>(sb.data()), c.slot_dtype, {w.rows});
  const Status st = write_kv(key, value, TensorView::contiguous(slots.get(), c.slot_dtype, {w.rows}, dev),
                             *cache, nullptr, opts);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  PA_ASSERT_OK(cuda::device_synchronize());
  const auto gk = kmem.bytes();
  EXPECT_TRUE(std::all_of(gk.begin(), gk.end(), [](std::uint8_t b) { return b == kCanary; }))
      << "a rejected write_kv changed the cache";
}

}  // namespace
}  // namespace pagedattn::cudatest
