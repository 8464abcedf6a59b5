// The public conversions (include/pagedattn/convert.h) over the library's own bit-level
// conversions (src/core/numeric.h), so that there is one implementation of each format.
#include "pagedattn/convert.h"

#include <cmath>
#include <string>

#include "src/core/numeric.h"

namespace pagedattn {

std::uint16_t float_to_fp16(float x) { return numeric::float_to_half_bits(x); }
float fp16_to_float(std::uint16_t bits) { return numeric::half_bits_to_float(bits); }
std::uint16_t float_to_bf16(float x) { return numeric::float_to_bf16_bits(x); }
float bf16_to_float(std::uint16_t bits) { return numeric::bf16_bits_to_float(bits); }
std::uint8_t float_to_fp8_e4m3(float x) { return numeric::float_to_e4m3(x); }
float fp8_e4m3_to_float(std::uint8_t bits) { return numeric::e4m3_to_float(bits); }
std::uint8_t float_to_fp8_e5m2(float x) { return numeric::float_to_e5m2(x); }
float fp8_e5m2_to_float(std::uint8_t bits) { return numeric::e5m2_to_float(bits); }

namespace {

Status invalid(const std::string& message) {
  return Status(StatusCode::kInvalidArgument, message);
}

Status check_buffers(const char* fn, const void* src, std::int64_t count, DType dtype,
                     const void* dst, float scale) {
  const std::string f = std::string(fn) + ": ";
  if (count < 0) return invalid(f + "count = " + std::to_string(count) + ": expected >= 0");
  if (count > 0 && src == nullptr) return invalid(f + "src is null");
  if (count > 0 && dst == nullptr) return invalid(f + "dst is null");
  if (dtype != DType::kFloat32 && dtype != DType::kFloat16 && dtype != DType::kBFloat16 &&
      !is_fp8(dtype))
    return invalid(f + "dtype " + to_string(dtype) +
                   ": expected fp32, fp16, bf16, fp8_e4m3 or fp8_e5m2");
  if (!(std::isfinite(scale) && scale > 0))
    return invalid(f + "scale = " + std::to_string(scale) + ": expected a finite value > 0");
  // Scales apply to fp8 caches only (KVCache): a scale for another dtype would be ignored there.
  if (!is_fp8(dtype) && scale != 1.0f)
    return invalid(f + "scale = " + std::to_string(scale) + " applies to fp8 dtypes only; " +
                   "expected 1 for " + to_string(dtype));
  return Status::Ok();
}

}  // namespace

Status convert_from_float(const float* src, std::int64_t count, DType dtype, void* dst,
                          float scale) {
  PAGEDATTN_RETURN_IF_ERROR(check_buffers("convert_from_float", src, count, dtype, dst, scale));
  const bool fp8 = is_fp8(dtype);
  for (std::int64_t i = 0; i < count; ++i)
    numeric::store_from_float(dst, dtype, i, fp8 ? src[i] / scale : src[i]);
  return Status::Ok();
}

Status convert_to_float(const void* src, std::int64_t count, DType dtype, float* dst,
                        float scale) {
  PAGEDATTN_RETURN_IF_ERROR(check_buffers("convert_to_float", src, count, dtype, dst, scale));
  const bool fp8 = is_fp8(dtype);
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = numeric::load_as_float(src, dtype, i);
    dst[i] = fp8 ? v * scale : v;
  }
  return Status::Ok();
}

}  // namespace pagedattn
