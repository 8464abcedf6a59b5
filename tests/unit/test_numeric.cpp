// Storage-format conversions (src/core/numeric.h, DESIGN.md §2.8): exhaustive decode -> encode
// round trips over every fp8 code and every fp16/bf16 bit pattern, round-to-nearest-even at
// every midpoint between neighbouring codes, saturation of fp8, IEEE overflow of fp16/bf16,
// and NaN preservation. Reference points are the formats' definitions (OCP OFP8 spec:
// e4m3fn max 448 = 0x7E, NaN 0x7F; e5m2 max 57344 = 0x7B, inf 0x7C).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "src/core/numeric.h"

namespace pagedattn::numeric {
namespace {

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

/// One storage format, seen through its encode/decode pair.
struct Format {
  const char* name;
  std::uint32_t num_codes;  // 256 or 65536
  std::uint32_t sign_bit;
  std::function<float(std::uint32_t)> decode;
  std::function<std::uint32_t(float)> encode;
  bool saturates;  // fp8: overflow clamps to the largest finite code; else IEEE infinity
};

Format e4m3() {
  return {"e4m3",
          256,
          0x80,
          [](std::uint32_t c) { return e4m3_to_float(static_cast<std::uint8_t>(c)); },
          [](float f) { return static_cast<std::uint32_t>(float_to_e4m3(f)); },
          true};
}
Format e5m2() {
  return {"e5m2",
          256,
          0x80,
          [](std::uint32_t c) { return e5m2_to_float(static_cast<std::uint8_t>(c)); },
          [](float f) { return static_cast<std::uint32_t>(float_to_e5m2(f)); },
          true};
}
Format half() {
  return {"fp16",
          65536,
          0x8000,
          [](std::uint32_t c) { return half_bits_to_float(static_cast<std::uint16_t>(c)); },
          [](float f) { return static_cast<std::uint32_t>(float_to_half_bits(f)); },
          false};
}
Format bf16() {
  return {"bf16",
          65536,
          0x8000,
          [](std::uint32_t c) { return bf16_bits_to_float(static_cast<std::uint16_t>(c)); },
          [](float f) { return static_cast<std::uint32_t>(float_to_bf16_bits(f)); },
          false};
}

class Formats : public ::testing::TestWithParam<Format> {};

TEST_P(Formats, EveryCodeRoundTripsExactly) {
  const Format f = GetParam();
  std::uint32_t nan_codes = 0, inf_codes = 0;
  for (std::uint32_t c = 0; c < f.num_codes; ++c) {
    const float v = f.decode(c);
    if (std::isnan(v)) {
      ++nan_codes;
      // NaN stays NaN (and keeps its sign).
      const std::uint32_t back = f.encode(v);
      EXPECT_TRUE(std::isnan(f.decode(back))) << f.name << " code " << c;
      EXPECT_EQ(back & f.sign_bit, c & f.sign_bit) << f.name << " code " << c;
      continue;
    }
    if (std::isinf(v)) {
      ++inf_codes;
      // fp8 saturates infinities to the largest finite value; fp16/bf16 keep them.
      const float back = f.decode(f.encode(v));
      if (f.saturates) {
        EXPECT_TRUE(std::isfinite(back)) << f.name << " code " << c;
      } else {
        EXPECT_EQ(f.encode(v), c) << f.name << " code " << c;
      }
      continue;
    }
    ASSERT_EQ(f.encode(v), c) << f.name << " code " << c << " value " << v;
  }
  // Counts from the formats' definitions.
  if (std::string(f.name) == "e4m3") {
    EXPECT_EQ(nan_codes, 2u);  // 0x7F, 0xFF
    EXPECT_EQ(inf_codes, 0u);
  } else if (std::string(f.name) == "e5m2") {
    EXPECT_EQ(nan_codes, 6u);  // exponent 31, mantissa 1..3, both signs
    EXPECT_EQ(inf_codes, 2u);
  } else if (std::string(f.name) == "fp16") {
    EXPECT_EQ(nan_codes, 2u * 1023u);
    EXPECT_EQ(inf_codes, 2u);
  } else {
    EXPECT_EQ(nan_codes, 2u * 127u);
    EXPECT_EQ(inf_codes, 2u);
  }
}

TEST_P(Formats, MidpointsRoundToEvenAndNeighboursToNearest) {
  const Format f = GetParam();
  const std::uint32_t half_range = f.num_codes / 2;  // positive codes; sign handled below
  std::uint32_t checked = 0;
  for (std::uint32_t c = 0; c + 1 < half_range; ++c) {
    const float lo = f.decode(c), hi = f.decode(c + 1);
    if (!std::isfinite(lo) || !std::isfinite(hi)) continue;
    // The midpoint of two neighbours of a format with <= 11 significand bits is exact in fp32.
    const float mid = static_cast<float>((static_cast<double>(lo) + static_cast<double>(hi)) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + static_cast<double>(hi)) / 2);
    const std::uint32_t even = (c % 2 == 0) ? c : c + 1;
    for (float sign : {1.0f, -1.0f}) {
      const std::uint32_t s = sign < 0 ? f.sign_bit : 0;
      EXPECT_EQ(f.encode(sign * mid), even | s)
          << f.name << " tie between codes " << c << ", " << c + 1;
      EXPECT_EQ(f.encode(sign * std::nextafter(mid, kInf)), (c + 1) | s)
          << f.name << " above the tie " << c;
      EXPECT_EQ(f.encode(sign * std::nextafter(mid, 0.0f)), c | s)
          << f.name << " below the tie " << c;
    }
    ++checked;
  }
  EXPECT_GT(checked, half_range / 2);
}

INSTANTIATE_TEST_SUITE_P(All, Formats, ::testing::Values(e4m3(), e5m2(), half(), bf16()),
                         [](const ::testing::TestParamInfo<Format>& param_info) {
                           return std::string(param_info.param.name);
                         });

TEST(Fp8, KnownValues) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_float(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_float(0xB8), -1.0f);
  EXPECT_EQ(e5m2_to_float(0x3C), 1.0f);
  EXPECT_EQ(e5m2_to_float(0x7B), 57344.0f);
  EXPECT_EQ(e5m2_to_float(0x01), std::ldexp(1.0f, -16));
  EXPECT_EQ(e5m2_to_float(0x7C), kInf);
  EXPECT_EQ(half_bits_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_bits_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(bf16_bits_to_float(0x3F80), 1.0f);
}

TEST(Fp8, SaturatesToTheLargestFiniteValue) {
  // e4m3: 448 is the largest; 464 (the midpoint to the non-existent 480) and beyond clamp.
  for (float v : {449.0f, 464.0f, 480.0f, 1e6f, 3.4e38f, kInf}) {
    EXPECT_EQ(float_to_e4m3(v), 0x7E) << v;
    EXPECT_EQ(float_to_e4m3(-v), 0xFE) << v;
  }
  for (float v : {57345.0f, 61440.0f, 1e9f, kInf}) {
    EXPECT_EQ(float_to_e5m2(v), 0x7B) << v;
    EXPECT_EQ(float_to_e5m2(-v), 0xFB) << v;
  }
}

TEST(Fp16Bf16, OverflowFollowsIeee) {
  // fp16: 65504 + half an ulp (65520) is a tie between 65504 (odd mantissa) and infinity.
  EXPECT_EQ(float_to_half_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half_bits(65520.0f), 0x7C00);
  EXPECT_EQ(float_to_half_bits(-1e9f), 0xFC00);
  EXPECT_EQ(float_to_bf16_bits(3.4e38f), 0x7F80);  // rounds past bf16's max 3.3895e38
  EXPECT_EQ(float_to_bf16_bits(kInf), 0x7F80);
}

TEST(Conversions, NanAndSignedZero) {
  EXPECT_EQ(float_to_e4m3(kNaN) & 0x7F, 0x7F);
  EXPECT_TRUE(std::isnan(e5m2_to_float(float_to_e5m2(kNaN))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(kNaN))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(kNaN))));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(-kNaN))));
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_half_bits(-0.0f), 0x8000);
  // Below half the smallest subnormal: zero; exactly half: a tie, to even (zero); above: 1.
  const float tiny = std::ldexp(1.0f, -10);  // half of e4m3's 2^-9
  EXPECT_EQ(float_to_e4m3(tiny), 0x00);
  EXPECT_EQ(float_to_e4m3(std::nextafter(tiny, 1.0f)), 0x01);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.0f, -12)), 0x00);
}

TEST(Conversions, HostHelpersAgreeWithTheBitFunctions) {
  for (float v : {0.3f, -1.7f, 300.0f, 1e-5f}) {
    unsigned char buf[4];
    store_from_float(buf, DType::kFloat8E4M3, 0, v);
    EXPECT_EQ(buf[0], float_to_e4m3(v));
    EXPECT_EQ(load_as_float(buf, DType::kFloat8E4M3, 0), e4m3_to_float(float_to_e4m3(v)));
    EXPECT_EQ(round_to(DType::kFloat8E5M2, v), e5m2_to_float(float_to_e5m2(v)));
    EXPECT_EQ(round_to(DType::kFloat16, v), half_bits_to_float(float_to_half_bits(v)));
    EXPECT_EQ(round_to(DType::kBFloat16, v), bf16_bits_to_float(float_to_bf16_bits(v)));
    EXPECT_EQ(round_to(DType::kFloat32, v), v);
  }
}

}  // namespace
}  // namespace pagedattn::numeric
