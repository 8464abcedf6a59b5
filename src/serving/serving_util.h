// Error helpers and the generator shared by the serving files (allocator, scheduler,
// presets, replay); internal to src/serving.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "pagedattn/status.h"
#include "src/testing/fill.h"

namespace pagedattn::serving::detail {

inline constexpr std::int64_t kMaxInt32 = std::numeric_limits<std::int32_t>::max();

inline Status invalid(std::string message) {
  return Status(StatusCode::kInvalidArgument, std::move(message));
}
inline Status internal(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

// A library call failed inside a step: keep its code (kDeviceUnavailable must stay exit 3) and
// say where it happened.
inline Status in_step(std::int64_t step, const char* what, const Status& status) {
  return Status(status.code(), fmt::format("step {}: {}: {}", step, what, status.message()));
}

// The serving generator (the free-list permutation, the row samples): SplitMix64
// (src/testing/fill.h) started from the mixed seed.
inline testing::SplitMix64 serving_rng(std::uint64_t seed) {
  return testing::SplitMix64(testing::mix64(seed ^ 0x5EEDull));
}

}  // namespace pagedattn::serving::detail
