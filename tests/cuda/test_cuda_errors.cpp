// The CUDA runtime's per-thread last error is shared with the caller: an error that a caller's
// own runtime call left unread must not come back as the failure of a later pagedattn call.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include "src/testing/harness.h"
#include "tests/cuda/cuda_test_util.h"

namespace pagedattn::cudatest {
namespace {

// Found when the GPU suite first ran in shards: CudaMultiDevice.DeviceIndexPastTheLastDevice
// IsRejected leaves a failed cudaSetDevice in the thread's last-error state, and the next
// write_kv reported it as its own launch failure ("write_kv launch: invalid device ordinal").
// Every entry point discards such an error on entry (DeviceGuard).
TEST(CudaErrors, AnEarlierFailedRuntimeCallOfTheCallerIsNotReportedAsOurs) {
  PA_SKIP_WITHOUT_GPU();
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  testing::CaseConfig c;
  c.device = Device::cuda(0);
  c.seq_lens = {33, 70};
  c.query_lens = {1, 5};
  for (const char* what : {"decode + prefill", "decode only"}) {
    ASSERT_NE(cudaSetDevice(count), cudaSuccess);  // left unread, as a caller might
    const testing::CaseResult r = testing::run_case(c);
    EXPECT_TRUE(r.status.ok()) << what << ": " << r.status.to_string();
    EXPECT_TRUE(r.pass) << what << ": " << r.detail;
    c.query_lens = {1, 1};
  }
}

}  // namespace
}  // namespace pagedattn::cudatest
