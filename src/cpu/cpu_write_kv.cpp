// The CPU backend's cache writer. A token's head vector lands in the cache as a few contiguous
// runs (one run for nhd/hnd, 16-byte runs for the split key, single elements for the split
// value), so the run list is computed once per call and each row is copied run by run.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "src/core/numeric.h"
#include "src/cpu/cpu_backend.h"

namespace pagedattn::cpu {
namespace {

/// A stretch of dims [dim, dim + len) that is contiguous in the cache, starting at element
/// `offset` relative to the token's (block, head, token) base.
struct Run {
  std::int64_t dim;
  std::int64_t len;
  std::int64_t offset;
};

/// Where one token's head vector goes in one cache tensor.
struct Destination {
  char* data = nullptr;
  std::int64_t block_stride = 0;
  std::int64_t head_stride = 0;
  std::int64_t token_stride = 0;
  std::vector<Run> runs;
};

Destination describe_destination(const TensorView& t, KVLayout layout, bool is_key,
                                 const KVCacheGeometry& geo) {
  Destination dst;
  dst.data = static_cast<char*>(t.data);
  dst.block_stride = t.stride(0);
  std::vector<std::int64_t> dim_offset(static_cast<std::size_t>(geo.head_size));
  for (std::int64_t d = 0; d < geo.head_size; ++d) {
    switch (layout) {
      case KVLayout::kSplit:
        dst.head_stride = t.stride(1);
        dst.token_stride = t.stride(3);
        // key [b, g, d/x, t, d%x]; value [b, g, d, t]
        dim_offset[d] = is_key ? (d / geo.x) * t.stride(2) + (d % geo.x) * t.stride(4)
                               : d * t.stride(2);
        break;
      case KVLayout::kNHD:  // [b, t, g, d]
        dst.token_stride = t.stride(1);
        dst.head_stride = t.stride(2);
        dim_offset[d] = d * t.stride(3);
        break;
      case KVLayout::kHND:  // [b, g, t, d]
        dst.head_stride = t.stride(1);
        dst.token_stride = t.stride(2);
        dim_offset[d] = d * t.stride(3);
        break;
    }
  }
  for (std::int64_t d = 0; d < geo.head_size; ++d) {
    if (!dst.runs.empty()) {
      Run& last = dst.runs.back();
      if (last.offset + last.len == dim_offset[d]) {
        ++last.len;
        continue;
      }
    }
    dst.runs.push_back({d, 1, dim_offset[d]});
  }
  return dst;
}

std::int64_t read_slot(const TensorView& slots, std::int64_t i) {
  const std::int64_t off = i * slots.stride(0);
  if (slots.dtype == DType::kInt64) return static_cast<const std::int64_t*>(slots.data)[off];
  return static_cast<const std::int32_t*>(slots.data)[off];
}

/// Write row `token` of `src` (all KV heads) into slot (block, in_block) of `dst`.
void write_row(const TensorView& src, std::int64_t token, const Destination& dst,
               std::int64_t block, std::int64_t in_block, const KVCacheGeometry& geo,
               const std::vector<float>& scales, std::vector<float>& row) {
  const std::int64_t elem = static_cast<std::int64_t>(dtype_size(geo.dtype));
  const bool fp8 = is_fp8(geo.dtype);
  const std::int64_t slot_base = block * dst.block_stride + in_block * dst.token_stride;
  for (std::int64_t g = 0; g < geo.num_kv_heads; ++g) {
    const std::int64_t src_off = token * src.stride(0) + g * src.stride(1);
    const std::int64_t dst_base = slot_base + g * dst.head_stride;
    if (!fp8) {
      // Same dtype (validated): the stored bits are the input's bits.
      const char* s = static_cast<const char*>(src.data) + src_off * elem;
      for (const Run& r : dst.runs) {
        std::memcpy(dst.data + (dst_base + r.offset) * elem, s + r.dim * elem,
                    static_cast<std::size_t>(r.len * elem));
      }
      continue;
    }
    // fp8: stored = fp8(x / scale), x the input value as float (DESIGN.md §2.6, §2.8).
    const float scale = scales[static_cast<std::size_t>(g)];
    for (std::int64_t d = 0; d < geo.head_size; ++d) {
      row[d] = numeric::load_as_float(src.data, src.dtype, src_off + d) / scale;
    }
    auto* out = reinterpret_cast<std::uint8_t*>(dst.data);
    for (const Run& r : dst.runs) {
      std::uint8_t* o = out + dst_base + r.offset;
      const float* x = row.data() + r.dim;
      if (geo.dtype == DType::kFloat8E4M3) {
        for (std::int64_t i = 0; i < r.len; ++i) o[i] = numeric::float_to_e4m3(x[i]);
      } else {
        for (std::int64_t i = 0; i < r.len; ++i) o[i] = numeric::float_to_e5m2(x[i]);
      }
    }
  }
}

}  // namespace

std::vector<float> head_scales(const KVCache& cache, const KVCacheGeometry& geo, bool key) {
  std::vector<float> out(static_cast<std::size_t>(geo.num_kv_heads), 1.0f);
  if (!is_fp8(geo.dtype)) return out;
  const TensorView& t = key ? cache.k_scales : cache.v_scales;
  for (std::int32_t g = 0; g < geo.num_kv_heads; ++g) {
    out[static_cast<std::size_t>(g)] =
        t.defined() ? static_cast<const float*>(t.data)[t.numel() > 1 ? g : 0]
                    : (key ? cache.k_scale : cache.v_scale);
  }
  return out;
}

Status write_kv(const TensorView& key, const TensorView& value, const TensorView& slot_mapping,
                const KVCache& cache, const KVCacheGeometry& geometry) {
  try {
    const Destination kdst = describe_destination(cache.key, cache.layout, true, geometry);
    const Destination vdst = describe_destination(cache.value, cache.layout, false, geometry);
    std::vector<float> row(static_cast<std::size_t>(geometry.head_size));
    const std::vector<float> k_scales = head_scales(cache, geometry, /*key=*/true);
    const std::vector<float> v_scales = head_scales(cache, geometry, /*key=*/false);
    const std::int64_t num_tokens = slot_mapping.size(0);
    const std::int64_t block_size = geometry.block_size;
    for (std::int64_t t = 0; t < num_tokens; ++t) {
      const std::int64_t slot = read_slot(slot_mapping, t);
      if (slot < 0) continue;  // padding token
      if (slot >= geometry.num_slots()) {
        // The caller validated every slot; this only keeps a bad caller from writing out of
        // bounds.
        return Status(StatusCode::kInvalidArgument,
                      "slot_mapping[" + std::to_string(t) + "] = " + std::to_string(slot) +
                          ": expected < " + std::to_string(geometry.num_slots()) + " slots");
      }
      const std::int64_t block = slot / block_size;
      const std::int64_t in_block = slot % block_size;
      write_row(key, t, kdst, block, in_block, geometry, k_scales, row);
      write_row(value, t, vdst, block, in_block, geometry, v_scales, row);
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, std::string("cpu write_kv: ") + e.what());
  }
}

}  // namespace pagedattn::cpu
