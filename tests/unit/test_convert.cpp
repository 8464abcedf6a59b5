// The public conversions (include/pagedattn/convert.h): each format against an independent
// reference (rounding to nearest even computed in double from the format's parameters, not
// from the library's bit manipulation), exhaustive decode -> encode round trips, the values
// the format definitions fix (IEEE 754 binary16, bfloat16, OCP OFP8 e4m3fn / e5m2), and the
// buffer conversions against what write_kv stores and what attention reads from an fp8 cache.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "pagedattn/convert.h"
#include "pagedattn/pagedattn.h"

namespace pagedattn {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint32_t bits_of(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float float_of(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// A format by its parameters, and the public encode/decode pair under test.
struct Format {
  const char* name;
  int precision;        // significand bits, the implicit one included
  int min_exponent;     // exponent of the smallest normal number
  double max_finite;
  bool saturates;       // fp8: overflow clamps to max_finite; fp16/bf16: IEEE infinity
  std::uint32_t num_codes;
  std::uint32_t sign_bit;
  std::function<std::uint32_t(float)> encode;
  std::function<float(std::uint32_t)> decode;
};

std::vector<Format> formats() {
  return {
      {"fp16", 11, -14, 65504.0, false, 65536, 0x8000,
       [](float x) { return std::uint32_t{float_to_fp16(x)}; },
       [](std::uint32_t c) { return fp16_to_float(static_cast<std::uint16_t>(c)); }},
      {"bf16", 8, -126, std::ldexp(2.0 - std::ldexp(1.0, -7), 127), false, 65536, 0x8000,
       [](float x) { return std::uint32_t{float_to_bf16(x)}; },
       [](std::uint32_t c) { return bf16_to_float(static_cast<std::uint16_t>(c)); }},
      {"e4m3", 4, -6, 448.0, true, 256, 0x80,
       [](float x) { return std::uint32_t{float_to_fp8_e4m3(x)}; },
       [](std::uint32_t c) { return fp8_e4m3_to_float(static_cast<std::uint8_t>(c)); }},
      {"e5m2", 3, -14, 57344.0, true, 256, 0x80,
       [](float x) { return std::uint32_t{float_to_fp8_e5m2(x)}; },
       [](std::uint32_t c) { return fp8_e5m2_to_float(static_cast<std::uint8_t>(c)); }},
  };
}

/// The value IEEE 754 roundTiesToEven gives for finite `x` in `f`, computed in double: scale
/// by the quantum of x's binade (exact: a power of two), round to an integer with ties to
/// even (the default rounding mode), scale back; past the largest finite value, infinity or
/// (fp8) the largest finite value.
double reference_round(const Format& f, float x) {
  if (x == 0.0f) return x;
  int k = 0;
  std::frexp(static_cast<double>(x), &k);  // |x| in [2^(k-1), 2^k)
  const int e = std::max(k - 1, f.min_exponent);
  const double quantum = std::ldexp(1.0, e - (f.precision - 1));
  const double r = std::nearbyint(static_cast<double>(x) / quantum) * quantum;
  if (std::fabs(r) > f.max_finite)
    return std::copysign(f.saturates ? f.max_finite : HUGE_VAL, static_cast<double>(x));
  return r;
}

TEST(Convert, MatchesIndependentRoundToNearestEven) {
  std::mt19937 gen(26);
  for (const Format& f : formats()) {
    SCOPED_TRACE(f.name);
    int failures = 0;
    auto check = [&](float x) {
      const double want = reference_round(f, x);
      const float got = f.decode(f.encode(x));
      if (got != want || std::signbit(got) != std::signbit(want)) {
        if (++failures <= 5)
          ADD_FAILURE() << "x = " << x << " (bits 0x" << std::hex << bits_of(x) << std::dec
                        << "): got " << got << ", want " << want;
      }
    };
    // Every fp32 binade, uniformly over the bit patterns (NaN excluded).
    std::uniform_int_distribution<std::uint32_t> any;
    for (int i = 0; i < 400000; ++i) {
      const float x = float_of(any(gen));
      if (!std::isnan(x) && !std::isinf(x)) check(x);
    }
    // Around every midpoint of the format: the midpoint itself (a tie) and its fp32 neighbours.
    for (std::uint32_t c = 0; c + 1 < f.num_codes / 2; ++c) {
      const float a = f.decode(c), b = f.decode(c + 1);
      if (!std::isfinite(a) || !std::isfinite(b)) continue;
      const float mid = static_cast<float>((static_cast<double>(a) + b) / 2);
      for (float x : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)}) {
        check(x);
        check(-x);
      }
    }
    // Past the largest finite value.
    for (float x : {static_cast<float>(f.max_finite) * 1.0625f, 1e30f, FLT_MAX}) {
      if (static_cast<double>(x) > f.max_finite) {
        check(x);
        check(-x);
      }
    }
    EXPECT_EQ(failures, 0);
  }
}

TEST(Convert, DecodeEncodeRoundTripsEveryCode) {
  for (const Format& f : formats()) {
    SCOPED_TRACE(f.name);
    for (std::uint32_t c = 0; c < f.num_codes; ++c) {
      const float v = f.decode(c);
      if (std::isnan(v)) {
        // NaN stays NaN, with its sign.
        const std::uint32_t back = f.encode(v);
        EXPECT_TRUE(std::isnan(f.decode(back))) << "code " << c;
        EXPECT_EQ(back & f.sign_bit, c & f.sign_bit) << "code " << c;
        continue;
      }
      if (std::isinf(v) && f.saturates) {
        // e5m2's infinity codes read as infinity but are written back saturated.
        EXPECT_EQ(f.encode(v), (c & f.sign_bit) | 0x7Bu) << "code " << c;
        continue;
      }
      EXPECT_EQ(f.encode(v), c) << "code " << c << " = " << v;
    }
  }
}

TEST(Convert, FormatDefinitionValues) {
  // IEEE binary16.
  EXPECT_EQ(float_to_fp16(1.0f), 0x3C00);
  EXPECT_EQ(float_to_fp16(-2.0f), 0xC000);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_fp16(65519.99f), 0x7BFF);         // below the midpoint to 65536
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7C00);          // the tie rounds to even: infinity
  EXPECT_EQ(float_to_fp16(kInf), 0x7C00);
  EXPECT_EQ(float_to_fp16(-kInf), 0xFC00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // tie between 0 and 2^-24: 0
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // tie between 1 and 2 quanta: 2
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3C00);       // tie: to even
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(3.0f, -11)), 0x3C02);       // tie: to even
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(kNaN) & 0x7E00, 0x7E00);
  EXPECT_EQ(float_to_fp16(-kNaN), 0xFE00);
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);
  EXPECT_TRUE(std::isinf(fp16_to_float(0x7C00)));
  // bfloat16: the upper half of an fp32, rounded.
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(float_of(0x3F808000u)), 0x3F80);  // tie: to even (0x3F80)
  EXPECT_EQ(float_to_bf16(float_of(0x3F818000u)), 0x3F82);  // tie: to even (0x3F82)
  EXPECT_EQ(float_to_bf16(float_of(0x3F808001u)), 0x3F81);  // above the tie
  EXPECT_EQ(float_to_bf16(FLT_MAX), 0x7F80);                // rounds past the largest: inf
  EXPECT_EQ(float_to_bf16(-kInf), 0xFF80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  EXPECT_EQ(float_to_bf16(-kNaN) & 0x8000, 0x8000);
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));  // subnormals are kept
  // OCP e4m3fn: no infinity, largest 448 = 0x7E, NaN 0x7F; saturating.
  EXPECT_EQ(float_to_fp8_e4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(464.0f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(1e6f), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(kInf), 0x7E);
  EXPECT_EQ(float_to_fp8_e4m3(-kInf), 0xFE);
  EXPECT_EQ(float_to_fp8_e4m3(kNaN), 0x7F);
  EXPECT_EQ(float_to_fp8_e4m3(-kNaN), 0xFF);
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -9)), 0x01);  // smallest subnormal
  EXPECT_EQ(float_to_fp8_e4m3(std::ldexp(1.0f, -10)), 0x00); // tie with 0: to even
  EXPECT_EQ(float_to_fp8_e4m3(1.0625f), 0x38);  // tie between 1 (0x38) and 1.125 (0x39)
  EXPECT_EQ(float_to_fp8_e4m3(1.1875f), 0x3A);  // tie between 1.125 and 1.25 (0x3A)
  EXPECT_EQ(fp8_e4m3_to_float(0x7E), 448.0f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_float(0xFF)));
  // OCP e5m2: largest 57344 = 0x7B, infinity 0x7C, NaN 0x7D..0x7F; saturating (inf too).
  EXPECT_EQ(float_to_fp8_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(float_to_fp8_e5m2(61440.0f), 0x7B);  // the tie to "65536" saturates
  EXPECT_EQ(float_to_fp8_e5m2(kInf), 0x7B);
  EXPECT_EQ(float_to_fp8_e5m2(-kInf), 0xFB);
  EXPECT_EQ(float_to_fp8_e5m2(kNaN), 0x7F);
  EXPECT_EQ(float_to_fp8_e5m2(std::ldexp(1.0f, -16)), 0x01);
  EXPECT_EQ(float_to_fp8_e5m2(1.125f), 0x3C);  // tie between 1 (0x3C) and 1.25 (0x3D)
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_float(0x7C)));
  EXPECT_TRUE(std::isinf(fp8_e5m2_to_float(0xFC)) && fp8_e5m2_to_float(0xFC) < 0);
  for (std::uint8_t c : {0x7D, 0x7E, 0x7F}) EXPECT_TRUE(std::isnan(fp8_e5m2_to_float(c)));
}

#if defined(__FLT16_MANT_DIG__)
// The compiler's _Float16 conversion is a second, independent implementation of binary16
// rounding (IEEE 754 in the C/C++ ABI).
TEST(Convert, Fp16MatchesTheCompilersFloat16) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<std::uint32_t> any;
  int failures = 0;
  for (int i = 0; i < 400000; ++i) {
    const float x = float_of(any(gen));
    if (std::isnan(x)) continue;
    const _Float16 h = static_cast<_Float16>(x);
    std::uint16_t want;
    std::memcpy(&want, &h, 2);
    if (float_to_fp16(x) != want && ++failures <= 5)
      ADD_FAILURE() << "x = " << x << ": got 0x" << std::hex << float_to_fp16(x) << ", want 0x"
                    << want;
  }
  EXPECT_EQ(failures, 0);
}
#endif

// ---- buffers

TEST(Convert, BuffersRoundTripEveryDtype) {
  const std::vector<float> src = {0.0f, -0.0f, 1.0f, -1.5f, 3.14159f, 1e-3f, -250.0f, 0.3f};
  const std::int64_t n = static_cast<std::int64_t>(src.size());
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3,
                  DType::kFloat8E5M2}) {
    SCOPED_TRACE(to_string(d));
    std::vector<std::uint8_t> buf(src.size() * dtype_size(d));
    ASSERT_TRUE(convert_from_float(src.data(), n, d, buf.data()).ok());
    std::vector<float> back(src.size());
    ASSERT_TRUE(convert_to_float(buf.data(), n, d, back.data()).ok());
    for (std::size_t i = 0; i < src.size(); ++i) {
      float want = src[i];
      if (d == DType::kFloat16) want = fp16_to_float(float_to_fp16(src[i]));
      if (d == DType::kBFloat16) want = bf16_to_float(float_to_bf16(src[i]));
      if (d == DType::kFloat8E4M3) want = fp8_e4m3_to_float(float_to_fp8_e4m3(src[i]));
      if (d == DType::kFloat8E5M2) want = fp8_e5m2_to_float(float_to_fp8_e5m2(src[i]));
      EXPECT_EQ(back[i], want) << i;
      EXPECT_EQ(std::signbit(back[i]), std::signbit(src[i])) << i;
    }
    // Converting the converted values again changes nothing.
    std::vector<std::uint8_t> again(buf.size());
    ASSERT_TRUE(convert_from_float(back.data(), n, d, again.data()).ok());
    EXPECT_EQ(again, buf);
  }
}

TEST(Convert, Fp8BytesEqualWhatWriteKvStores) {
  // One token of 2 KV heads x 32 into an nhd fp8 cache with k_scale 0.37 and v_scale 3: the
  // stored bytes must equal convert_from_float(x, scale), including saturated and NaN inputs.
  const int kvh = 2, d = 32;
  std::vector<float> k(kvh * d), v(kvh * d);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> u(-600.0f, 600.0f);
  for (auto& x : k) x = u(gen);
  for (auto& x : v) x = u(gen) * 400.0f;  // many beyond e4m3's range after the scale
  k[1] = kNaN;
  v[2] = kInf;
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    SCOPED_TRACE(to_string(fp8));
    const float k_scale = 0.37f, v_scale = 3.0f;
    KVCacheSpec spec{KVLayout::kNHD, 1, 1, kvh, d, fp8, 0};
    auto elems = kv_cache_elements(spec);
    ASSERT_TRUE(elems.ok());
    std::vector<std::uint8_t> kc(static_cast<std::size_t>(*elems)), vc(kc.size());
    auto cache = make_kv_cache(spec, kc.data(), vc.data(), Device::cpu(), k_scale, v_scale);
    ASSERT_TRUE(cache.ok()) << cache.status().to_string();
    std::int64_t slot = 0;
    Status st = write_kv(TensorView::contiguous(k.data(), DType::kFloat32, {1, kvh, d}),
                         TensorView::contiguous(v.data(), DType::kFloat32, {1, kvh, d}),
                         TensorView::contiguous(&slot, DType::kInt64, {1}), *cache);
    ASSERT_TRUE(st.ok()) << st.to_string();
    std::vector<std::uint8_t> kw(k.size()), vw(v.size());
    ASSERT_TRUE(convert_from_float(k.data(), kvh * d, fp8, kw.data(), k_scale).ok());
    ASSERT_TRUE(convert_from_float(v.data(), kvh * d, fp8, vw.data(), v_scale).ok());
    EXPECT_EQ(kc, kw);
    EXPECT_EQ(vc, vw);
  }
}

TEST(Convert, Fp8ReadBackEqualsWhatAttentionReads) {
  // A sequence of one key: softmax weight 1, so attention's output is that key's value as the
  // kernels dequantise it, float(stored) * v_scale (fp32 output, no rounding).
  const int d = 16;
  for (DType fp8 : {DType::kFloat8E4M3, DType::kFloat8E5M2}) {
    SCOPED_TRACE(to_string(fp8));
    const float v_scale = 0.75f;
    KVCacheSpec spec{KVLayout::kNHD, 1, 4, 1, d, fp8, 0};
    auto elems = kv_cache_elements(spec);
    ASSERT_TRUE(elems.ok());
    std::vector<float> keys(static_cast<std::size_t>(*elems), 0.5f);
    std::vector<float> values(keys.size());
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.37f * static_cast<float>(i) - 2.0f;
    std::vector<std::uint8_t> kc(keys.size()), vc(keys.size());
    ASSERT_TRUE(convert_from_float(keys.data(), *elems, fp8, kc.data(), 1.0f).ok());
    ASSERT_TRUE(convert_from_float(values.data(), *elems, fp8, vc.data(), v_scale).ok());
    auto cache = make_kv_cache(spec, kc.data(), vc.data(), Device::cpu(), 1.0f, v_scale);
    ASSERT_TRUE(cache.ok());
    std::vector<float> q(d, 0.25f), out(d, kNaN);
    std::int32_t table = 0, seq_len = 1, starts[2] = {0, 1};
    AttentionArgs args;
    args.query = TensorView::contiguous(q.data(), DType::kFloat32, {1, 1, d});
    args.out = TensorView::contiguous(out.data(), DType::kFloat32, {1, 1, d});
    args.cache = *cache;
    args.block_table = TensorView::contiguous(&table, DType::kInt32, {1, 1});
    args.seq_lens = TensorView::contiguous(&seq_len, DType::kInt32, {1});
    args.query_start_loc = TensorView::contiguous(starts, DType::kInt32, {2});
    args.params.scale = default_scale(d);
    ASSERT_TRUE(paged_attention(args, HostMetadata::from_args(args)).ok());
    std::vector<float> want(d);
    ASSERT_TRUE(convert_to_float(vc.data(), d, fp8, want.data(), v_scale).ok());
    for (int i = 0; i < d; ++i) EXPECT_EQ(out[static_cast<std::size_t>(i)], want[static_cast<std::size_t>(i)]) << i;
  }
}

TEST(Convert, BufferErrorsNameTheArgumentAndWriteNothing) {
  float src[2] = {1.0f, 2.0f};
  std::uint16_t dst[2] = {0xAAAA, 0xAAAA};
  float fdst[2] = {7.0f, 7.0f};
  auto expect_invalid = [&](const Status& st, const char* needle) {
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(needle), std::string::npos) << st.message();
    EXPECT_EQ(dst[0], 0xAAAA);
    EXPECT_EQ(fdst[0], 7.0f);
  };
  expect_invalid(convert_from_float(src, -1, DType::kFloat16, dst), "count = -1");
  expect_invalid(convert_from_float(nullptr, 2, DType::kFloat16, dst), "src is null");
  expect_invalid(convert_from_float(src, 2, DType::kFloat16, nullptr), "dst is null");
  expect_invalid(convert_from_float(src, 2, DType::kInt32, dst), "dtype int32");
  expect_invalid(convert_from_float(src, 2, DType::kFloat16, dst, 2.0f), "fp8 dtypes only");
  expect_invalid(convert_from_float(src, 2, DType::kFloat8E4M3, dst, 0.0f), "scale");
  expect_invalid(convert_from_float(src, 2, DType::kFloat8E4M3, dst, kInf), "scale");
  expect_invalid(convert_to_float(dst, 2, DType::kInt64, fdst), "dtype int64");
  expect_invalid(convert_to_float(dst, 2, DType::kBFloat16, fdst, 0.5f), "fp8 dtypes only");
  expect_invalid(convert_to_float(nullptr, 1, DType::kBFloat16, fdst), "src is null");
  // count 0 with null pointers is a no-op.
  EXPECT_TRUE(convert_from_float(nullptr, 0, DType::kFloat16, nullptr).ok());
  EXPECT_TRUE(convert_to_float(nullptr, 0, DType::kFloat8E5M2, nullptr, 2.0f).ok());
}

}  // namespace
}  // namespace pagedattn
