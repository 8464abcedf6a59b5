// libFuzzer target: merge_attention_states on the CPU against the log-sum-exp identity
// evaluated in double (attention.h), including -inf states, in-place outputs, and shape or
// dtype mismatches (which must be rejected with nothing written).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz/fuzz_bytes.h"
#include "pagedattn/pagedattn.h"
#include "src/core/numeric.h"
#include "src/testing/harness.h"

namespace pagedattn::fuzz {
namespace {

[[noreturn]] void fail(const std::string& what) { fuzz::fail("fuzz_merge", what); }

float lse_value(ByteReader& in) {
  switch (in.pick(8)) {
    case 0: return -INFINITY;
    case 1: return in.f32();  // any bit pattern: +inf, NaN, huge
    case 2: return INFINITY;
    default: return static_cast<float>(in.range(-4000, 4000)) / 100.0f;
  }
}

void one_input(ByteReader& in) {
  constexpr DType kDtypes[] = {DType::kFloat32, DType::kFloat16, DType::kBFloat16};
  const DType dtype = kDtypes[in.pick(3)];
  const int T = in.range(0, 6), H = in.range(1, 4), D = in.range(1, 48);
  const std::int64_t n = std::int64_t{T} * H * D;
  const std::size_t es = dtype_size(dtype);
  std::vector<std::uint8_t> a(static_cast<std::size_t>(n) * es), b(a.size()), o(a.size(), 0x77);
  std::vector<float> la(static_cast<std::size_t>(T * H)), lb(la.size()), lo(la.size(), 7.0f);
  for (auto& v : la) v = lse_value(in);
  for (auto& v : lb) v = lse_value(in);
  const std::uint64_t seed = in.u64();
  fill_uniform(a.data(), dtype, n, seed);
  fill_uniform(b.data(), dtype, n, seed + 1);
  const std::vector<std::uint8_t> a0 = a, b0 = b;
  const std::vector<float> la0 = la, lb0 = lb;

  TensorView va = TensorView::contiguous(a.data(), dtype, {T, H, D});
  TensorView vb = TensorView::contiguous(b.data(), dtype, {T, H, D});
  TensorView vo = TensorView::contiguous(o.data(), dtype, {T, H, D});
  TensorView vla = TensorView::contiguous(la.data(), DType::kFloat32, {T, H});
  TensorView vlb = TensorView::contiguous(lb.data(), DType::kFloat32, {T, H});
  TensorView vlo = TensorView::contiguous(lo.data(), DType::kFloat32, {T, H});
  const int out_mode = in.pick(3);  // 0: own buffer, 1: in place over a, 2: over b
  if (out_mode == 1) vo = va;
  if (out_mode == 2) vo = vb;
  const int lse_mode = in.pick(4);  // 0: own, 1: over lse_a, 2: over lse_b, 3: absent
  if (lse_mode == 1) vlo = vla;
  if (lse_mode == 2) vlo = vlb;
  if (lse_mode == 3) vlo = TensorView{};
  bool expect_error = false;
  switch (in.pick(8)) {  // one mismatch now and then
    case 0: vb.shape[2] = D + 1, vb.strides[1] = D + 1, vb.strides[0] = H * (D + 1), expect_error = true; break;
    case 1: vlb.shape[1] = H + 1, vlb.strides[0] = H + 1, expect_error = true; break;
    case 2: if (dtype != DType::kFloat32) vo.dtype = DType::kFloat32, expect_error = true; break;
    default: break;
  }
  if (expect_error && n == 0) expect_error = false;  // empty tensors may be accepted either way
  const std::vector<std::uint8_t> o0 = o;
  const std::vector<float> lo0 = lo;
  const Status st = merge_attention_states(va, vla, vb, vlb, vo, vlo);
  if (!st.ok()) {
    if (st.code() != StatusCode::kInvalidArgument) fail("merge: " + st.to_string());
    // Bytes, not values: NaN != NaN.
    const auto differ = [](const std::vector<float>& x, const std::vector<float>& y) {
      return !x.empty() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) != 0;
    };
    const char* changed = a != a0 ? "out_a" : b != b0 ? "out_b" : o != o0 ? "out" : differ(la, la0) ? "lse_a"
                          : differ(lb, lb0) ? "lse_b" : differ(lo, lo0) ? "lse_out" : nullptr;
    if (changed) fail(std::string("a rejected merge wrote ") + changed + ": " + st.to_string());
    return;
  }
  if (expect_error) fail("a mismatched merge was accepted");

  const testing::Tolerance tol = testing::tolerance_for(dtype, dtype);
  const std::uint8_t* got = out_mode == 0 ? o.data() : out_mode == 1 ? a.data() : b.data();
  const float* got_lse = lse_mode == 0 ? lo.data() : lse_mode == 1 ? la.data() : lb.data();
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < H; ++h) {
      const std::size_t r = static_cast<std::size_t>(t * H + h);
      const double A = la0[r], B = lb0[r];
      bool nan = std::isnan(A) || std::isnan(B) || A == INFINITY || B == INFINITY;
      double wa = 0, wb = 0, lse = -INFINITY;
      if (!nan && !(A == -INFINITY && B == -INFINITY)) {
        const double m = std::max(A, B);
        wa = std::exp(A - m), wb = std::exp(B - m);
        lse = m + std::log(wa + wb);
        wa /= wa + wb, wb = 1 - wa;
      }
      if (lse_mode != 3) {
        const double g = got_lse[r];
        const bool ok = nan ? std::isnan(g)
                            : (g == lse || std::fabs(g - lse) <= 1e-5 + 1e-5 * std::fabs(lse));
        if (!ok) fail("lse[" + std::to_string(r) + "] = " + std::to_string(g) + ", expected " + std::to_string(lse));
      }
      for (int d = 0; d < D; ++d) {
        const std::int64_t i = static_cast<std::int64_t>(r) * D + d;
        const double want = wa * numeric::load_as_float(a0.data(), dtype, i) +
                            wb * numeric::load_as_float(b0.data(), dtype, i);
        const double g = numeric::load_as_float(got, dtype, i);
        const bool ok = nan ? std::isnan(g) : std::fabs(g - want) <= tol.atol + tol.rtol * std::fabs(want);
        if (!ok) fail("out[" + std::to_string(i) + "] = " + std::to_string(g) + ", expected " + std::to_string(want));
      }
    }
}

}  // namespace
}  // namespace pagedattn::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  pagedattn::fuzz::ByteReader in(data, size);
  pagedattn::fuzz::one_input(in);
  return 0;
}
