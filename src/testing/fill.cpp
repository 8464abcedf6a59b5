// NaN poison patterns (fill.h).
#include "src/testing/fill.h"

#include <algorithm>
#include <cstring>

namespace pagedattn::testing {

std::vector<std::uint8_t> poison_element(DType dtype) {
  std::vector<std::uint8_t> e(dtype_size(dtype));
  switch (dtype) {
    case DType::kFloat32: {
      const std::uint32_t v = 0x7FC5A5A5u;
      std::memcpy(e.data(), &v, 4);
      break;
    }
    case DType::kFloat16: {
      const std::uint16_t v = 0x7E5Au;
      std::memcpy(e.data(), &v, 2);
      break;
    }
    case DType::kBFloat16: {
      const std::uint16_t v = 0x7FDAu;
      std::memcpy(e.data(), &v, 2);
      break;
    }
    case DType::kFloat8E4M3:
      e[0] = 0x7F;
      break;  // e4m3fn NaN
    case DType::kFloat8E5M2:
      e[0] = 0xFF;
      break;  // e5m2 NaN (exponent 31, mantissa 3)
    default:
      std::fill(e.begin(), e.end(), 0xA5);
      break;
  }
  return e;
}

std::vector<std::uint8_t> poisoned_bytes(DType dtype, std::int64_t elements) {
  const std::vector<std::uint8_t> e = poison_element(dtype);
  std::vector<std::uint8_t> out(static_cast<std::size_t>(elements) * e.size());
  for (std::size_t i = 0; i < out.size(); i += e.size()) std::memcpy(&out[i], e.data(), e.size());
  return out;
}

void fill_pattern(unsigned char* dst, std::size_t bytes, const std::vector<std::uint8_t>& element) {
  const std::size_t es = element.size();
  for (std::size_t i = 0; i + es <= bytes; i += es) std::memcpy(dst + i, element.data(), es);
}

}  // namespace pagedattn::testing
