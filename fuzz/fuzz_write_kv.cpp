// libFuzzer target: write_kv on the CPU against the writer oracle (reference_write_kv).
// Both must accept or reject the same inputs; an accepted call must give the oracle's cache
// bit for bit, and a rejected one must leave the cache exactly as it was (write_kv.h:
// nothing is written when an error is returned).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz/fuzz_bytes.h"
#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"

namespace pagedattn::fuzz {
namespace {

[[noreturn]] void fail(const std::string& what) { fuzz::fail("fuzz_write_kv", what); }

void one_input(ByteReader& in) {
  constexpr KVLayout kLayouts[] = {KVLayout::kSplit, KVLayout::kNHD, KVLayout::kHND};
  constexpr DType kCacheDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16,
                                    DType::kFloat8E4M3, DType::kFloat8E5M2};
  constexpr DType kInputDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  KVCacheSpec spec;
  spec.layout = kLayouts[in.pick(3)];
  spec.dtype = kCacheDtypes[in.pick(5)];
  spec.head_size = in.flag() ? in.range(0, 270) : 8 * in.range(1, 8);
  spec.num_kv_heads = in.range(1, 3);
  spec.block_size = in.range(1, 40);
  spec.num_blocks = in.range(1, 16);
  spec.page_pad = in.range(0, 4);
  const DType in_dtype = is_fp8(spec.dtype) || in.pick(8) == 0 ? kInputDtypes[in.pick(3)] : spec.dtype;
  const int num_tokens = in.range(0, 30);
  const int rows = num_tokens + in.range(0, 2);  // CUDA-graph padding rows are ignored
  const std::int64_t head_stride = spec.head_size + in.range(0, 3);
  const std::int64_t token_stride = spec.num_kv_heads * head_stride + in.range(0, 5);
  const float k_scale = in.flag() ? in.f32() : 0.5f;
  const float v_scale = in.flag() ? in.f32() : 2.0f;

  auto elems = kv_cache_elements(spec);
  if (!elems.ok()) return;  // a head size of 0 and the like: nothing to allocate
  std::vector<std::uint8_t> kc(static_cast<std::size_t>(*elems) * dtype_size(spec.dtype), 0xC3);
  std::vector<std::uint8_t> vc(kc.size(), 0x3C);
  auto cache = make_kv_cache(spec, kc.data(), vc.data(), Device::cpu(), k_scale, v_scale);
  if (!cache.ok()) return;  // describe_kv_cache's own checks (head sizes, scales)

  const std::size_t ies = dtype_size(in_dtype);
  const std::int64_t kv_elems = rows > 0 ? (rows - 1) * token_stride + (spec.num_kv_heads - 1) * head_stride + spec.head_size : 0;
  std::vector<std::uint8_t> key(static_cast<std::size_t>(kv_elems) * ies), value(key.size());
  testing::SplitMix64 rng(in.u64());
  for (auto* buf : {&key, &value})
    for (std::int64_t i = 0; i < kv_elems; ++i) {
      // Wide values so that fp8 saturation and rounding are exercised, and now and then a
      // special value (NaN, inf) in the input.
      float f = rng.uniform(-600.0f, 600.0f);
      const std::uint64_t r = rng.next();
      if ((r & 0xFFF) == 7) f = (r & 0x1000) ? NAN : INFINITY;
      numeric::store_from_float(buf->data(), in_dtype, i, f);
    }
  const TensorView key_view = TensorView::strided(
      key.data(), in_dtype, {rows, spec.num_kv_heads, spec.head_size}, {token_stride, head_stride, 1});
  TensorView value_view = key_view;
  value_view.data = value.data();
  if (in.pick(16) == 0) value_view.data = kc.data();  // an input inside the cache: rejected

  const bool i32 = in.flag();
  const std::int64_t num_slots = spec.num_blocks * spec.block_size;
  std::vector<std::int64_t> slots(static_cast<std::size_t>(num_tokens));
  for (auto& s : slots) {
    switch (in.pick(6)) {
      case 0: s = static_cast<std::int32_t>(in.u32()); break;
      case 1: s = in.flag() ? -1 : num_slots; break;
      default: s = in.u16() % num_slots;
    }
  }
  std::vector<std::int32_t> slots32(slots.begin(), slots.end());
  const TensorView slot_view =
      i32 ? TensorView::contiguous(slots32.data(), DType::kInt32, {num_tokens})
          : TensorView::contiguous(slots.data(), DType::kInt64, {num_tokens});

  const std::vector<std::uint8_t> kc0 = kc, vc0 = vc;
  const Status st = write_kv(key_view, value_view, slot_view, *cache);
  const std::vector<std::uint8_t> kc1 = kc, vc1 = vc;
  kc = kc0, vc = vc0;
  const Status ref = reference_write_kv(key_view, value_view, slot_view, *cache);
  if (st.ok() != ref.ok())
    fail("write_kv says '" + st.to_string() + "', the writer oracle '" + ref.to_string() + "'");
  if (!st.ok()) {
    if (st.code() != StatusCode::kInvalidArgument && st.code() != StatusCode::kUnsupported)
      fail("write_kv: " + st.to_string());
    if (kc1 != kc0 || vc1 != vc0) fail("write_kv changed the cache and returned " + st.to_string());
    return;
  }
  if (kc1 != kc || vc1 != vc) fail("write_kv differs from the writer oracle");
}

}  // namespace
}  // namespace pagedattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pagedattn::fuzz::ByteReader in(data, size);
  pagedattn::fuzz::one_input(in);
  return 0;
}
