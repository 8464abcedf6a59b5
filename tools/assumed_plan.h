// select_kernel's decision for a configuration on an assumed device (tools/device_presets.h),
// shared by `explain --assume-device` and `bench --list --assume-device`.
#pragma once

#include "pagedattn/pagedattn.h"
#include "src/testing/harness.h"
#include "tools/shape_plan.h"

namespace pagedattn::cli {

/// The decision for `c` (any device field) on `info`: `c` is planned on shapes on the CPU,
/// which validates it and summarises the batch as for any device, and the problem is handed to
/// select_kernel as a problem on info.device. No GPU is queried, so it answers in a CPU-only
/// build too. `with_lse`: the call also writes the log-sum-exp (as plan_on_shapes). `shaped`
/// (optional) receives the CPU shape plan (its cache view), `problem`
/// (optional) the problem as selected. The CUDA backend's plan-time refinements (the
/// small-call kernel, KV-head pairing from the actual strides, the workspace) are not made.
/// Errors: those of plan_on_shapes, then those of select_kernel (kUnsupported with the reason).
inline Result<KernelChoice> select_on_assumed_device(testing::CaseConfig c, const DeviceInfo& info,
                                                     bool with_lse, ShapePlan* shaped = nullptr,
                                                     ProblemDesc* problem = nullptr) {
  c.device = Device::cpu();
  // Nothing is allocated for the decision, and the tensors would live on the assumed GPU
  // (141 GB on an H200), not in this machine's memory: no host-memory bound.
  auto plan = plan_on_shapes(c, with_lse, /*check_memory=*/false);
  if (!plan.ok()) return plan.status();
  ProblemDesc p = plan->plan.problem();
  p.device = info.device;
  if (shaped) *shaped = *plan;
  if (problem) *problem = p;
  return select_kernel(p, info, c.plan);
}

}  // namespace pagedattn::cli
