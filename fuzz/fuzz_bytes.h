// Reading a fuzzer's input as a sequence of small decisions, and writing such a sequence (the
// seed corpus is made of matrix cases written this way, so that the fuzzer starts from inputs
// the project already knows to be interesting).
//
// libFuzzer's FuzzedDataProvider takes integers from the end of the input, which makes an
// encoder for it awkward; this reader takes bytes front to back, so ByteWriter is its exact
// inverse. An exhausted input reads as zeros: every prefix of an input is an input.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "pagedattn/tensor.h"
#include "src/core/numeric.h"
#include "src/testing/fill.h"

namespace pagedattn::fuzz {

class ByteReader {
 public:
  ByteReader(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t u8() { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(u16() | (std::uint32_t{u16()} << 16)); }
  std::uint64_t u64() { return u32() | (std::uint64_t{u32()} << 32); }
  /// A value in [0, n) (n >= 1) from one byte.
  int pick(int n) { return static_cast<int>(u8() % n); }
  /// A value in [lo, hi] from two bytes.
  int range(int lo, int hi) { return lo + static_cast<int>(u16() % (hi - lo + 1)); }
  bool flag() { return u8() & 1; }
  float f32() {
    const std::uint32_t bits = u32();
    float v;
    std::memcpy(&v, &bits, sizeof v);
    return v;
  }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// The inverse of ByteReader: `w.pick(v)` writes what makes `r.pick(n)` return v (v < n).
class ByteWriter {
 public:
  void u8(std::uint8_t v) { bytes_.push_back(v); }
  void u16(std::uint16_t v) { u8(v & 0xff), u8(v >> 8); }
  void u32(std::uint32_t v) { u16(v & 0xffff), u16(v >> 16); }
  void u64(std::uint64_t v) { u32(static_cast<std::uint32_t>(v)), u32(static_cast<std::uint32_t>(v >> 32)); }
  void pick(int v) { u8(static_cast<std::uint8_t>(v)); }
  void range(int lo, int v) { u16(static_cast<std::uint16_t>(v - lo)); }
  void flag(bool v) { u8(v ? 1 : 0); }
  void f32(float v) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, sizeof v);
    u32(bits);
  }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  std::vector<std::uint8_t> bytes_;
};

/// A finding: print what the target saw and abort, which libFuzzer reports as a crash and
/// saves the input of.
[[noreturn]] inline void fail(const char* target, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", target, what.c_str());
  std::abort();
}

/// `elements` values of `dtype` at `dst`, uniform in [-scale, scale), from the project's
/// seeded generator (src/testing/fill.h).
inline void fill_uniform(void* dst, DType dtype, std::int64_t elements, std::uint64_t seed,
                         float scale = 1.0f) {
  testing::SplitMix64 rng(seed);
  for (std::int64_t i = 0; i < elements; ++i)
    numeric::store_from_float(dst, dtype, i, rng.uniform(-scale, scale));
}

}  // namespace pagedattn::fuzz
