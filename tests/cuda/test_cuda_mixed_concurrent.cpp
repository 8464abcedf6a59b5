// Mixed batches whose prefill rows run on a second stream beside the decode rows (run_forked,
// src/cuda/backend/side_stream.h): the same bits as the serial order, the oracle, CUDA-graph
// capture of the fork and join, one second stream per host thread, and an eager call while a
// capture that the second stream joined is still open.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/cuda/backend/side_stream.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/run_together.h"

namespace pagedattn::cudatest {
namespace {

// Restores the environment's choice when a test ends, also on a failed assertion.
struct ConcurrentMode {
  explicit ConcurrentMode(int on) { cuda::set_mixed_concurrent_for_testing(on); }
  ~ConcurrentMode() { cuda::set_mixed_concurrent_for_testing(-1); }
};

struct MixedCase {
  const char* what;
  ProblemSpec spec;
};

std::vector<MixedCase> mixed_cases() {
  std::vector<MixedCase> out;
  {
    // T-conv-mixed's shape, smaller: decodes of many lengths and two chunks after a context.
    ProblemSpec s;
    s.num_heads = 32;
    s.num_kv_heads = 8;
    s.head_size = 128;
    s.dtype = s.kv_dtype = DType::kBFloat16;
    for (int i = 0; i < 40; ++i) {
      s.seq_lens.push_back(97 + 131 * i);
      s.query_lens.push_back(1);
    }
    s.seq_lens.insert(s.seq_lens.end(), {700, 512});
    s.query_lens.insert(s.query_lens.end(), {512, 512});
    out.push_back({"32/8 heads, head 128, 40 decodes + 2 chunks of 512", s});
  }
  {
    // Every feature, a masked head on both kernels, a zero-length query and a 1-token prefix.
    ProblemSpec s;
    s.num_heads = 12;
    s.num_kv_heads = 4;
    s.head_size = 96;
    s.block_size = 32;
    s.dtype = s.kv_dtype = DType::kBFloat16;
    s.seq_lens = {700, 47, 1, 5, 260, 3000};
    s.query_lens = {1, 9, 1, 0, 33, 1};
    s.softcap = 30.0f;
    s.alibi = true;
    s.sinks = true;
    s.sliding_window = 200;
    out.push_back({"head 96, every feature, empty query", s});
  }
  {
    // fp16, head 64, the split layout with padded pages: the chunks on the mma.sync prefill
    // kernel (the wgmma one does not take this layout), GQA 2.
    ProblemSpec s;
    s.layout = KVLayout::kSplit;
    s.num_heads = 16;
    s.num_kv_heads = 8;
    s.head_size = 64;
    s.dtype = s.kv_dtype = DType::kFloat16;
    s.page_pad = 64;
    s.seq_lens = {5000, 17, 300, 64};
    s.query_lens = {1, 17, 1, 40};
    out.push_back({"fp16, head 64, split layout, padded pages (mma.sync prefill)", s});
  }
  return out;
}

bool reason_has(const Problem& pr, const char* text) {
  return pr.attention_plan().choice().reason.find(text) != std::string::npos;
}

TEST(CudaMixedConcurrent, ForkedEqualsSerialBitForBitAndCaptures) {
  PA_SKIP_WITHOUT_GPU();
  for (const MixedCase& c : mixed_cases()) {
    SCOPED_TRACE(c.what);
    auto p = Problem::make(c.spec);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    Problem& pr = **p;
    auto stream = cuda::testsupport::stream_create();
    ASSERT_TRUE(stream.ok());

    std::vector<std::uint8_t> serial_out, serial_lse;
    {
      ConcurrentMode mode(0);
      PA_ASSERT_OK(pr.plan());
      const KernelChoice& ch = pr.attention_plan().choice();
      ASSERT_TRUE(ch.decode_rows_fast_path && ch.prefill_rows_mma) << ch.reason;
      EXPECT_TRUE(reason_has(pr, "before the prefill kernel")) << ch.reason;
      PA_ASSERT_OK(pr.poison_outputs());
      PA_ASSERT_OK(cuda::device_synchronize());
      const std::int64_t forks = cuda::forks_on_this_thread();
      PA_ASSERT_OK(pr.run(*stream));
      EXPECT_EQ(cuda::forks_on_this_thread(), forks) << "mode 0 forked";
      PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*stream));
      EXPECT_EQ(pr.check_against_oracle(), "");
      serial_out = pr.out_bytes();
      serial_lse = pr.lse_bytes();
    }
    for (int m : {1, 2}) {
      SCOPED_TRACE(m == 1 ? "prefill rows on the second stream"
                          : "decode rows on the second stream");
      ConcurrentMode mode(m);
      PA_ASSERT_OK(pr.plan());
      EXPECT_TRUE(reason_has(pr, m == 1 ? "(its rows on a second stream"
                                        : "(the decode rows on a second stream"))
          << pr.attention_plan().choice().reason;
      for (int rep = 0; rep < 3; ++rep) {
        PA_ASSERT_OK(pr.poison_outputs());
        PA_ASSERT_OK(cuda::device_synchronize());
        const std::int64_t forks = cuda::forks_on_this_thread();
        PA_ASSERT_OK(pr.run(*stream));
        EXPECT_EQ(cuda::forks_on_this_thread(), forks + 1) << "the call ran serially";
        // Only the caller's stream is synchronised: the join must make it wait for both.
        PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*stream));
        EXPECT_TRUE(pr.out_bytes() == serial_out) << "run " << rep << ": out differs from serial";
        EXPECT_TRUE(pr.lse_bytes() == serial_lse) << "run " << rep << ": lse differs from serial";
      }
      // The legacy default stream as the caller's stream.
      PA_ASSERT_OK(pr.poison_outputs());
      PA_ASSERT_OK(cuda::device_synchronize());
      PA_ASSERT_OK(pr.run(nullptr));
      PA_ASSERT_OK(cuda::testsupport::stream_synchronize(nullptr));
      EXPECT_TRUE(pr.out_bytes() == serial_out) << "legacy stream: out differs from serial";
      EXPECT_TRUE(pr.lse_bytes() == serial_lse) << "legacy stream: lse differs from serial";
      ASSERT_NO_FATAL_FAILURE(expect_graph_replay_equals_eager(pr));
    }
    cuda::testsupport::stream_destroy(*stream);
  }
}

// Each host thread forks onto a second stream of its own: two threads running mixed batches
// on their own streams at once each get the serial result on every call.
TEST(CudaMixedConcurrent, TwoThreadsEachGetTheSerialResult) {
  PA_SKIP_WITHOUT_GPU();
  std::vector<MixedCase> cases = mixed_cases();
  std::vector<std::unique_ptr<Problem>> problems;
  std::vector<void*> streams;
  std::vector<std::vector<std::uint8_t>> expected;
  for (int i = 0; i < 2; ++i) {
    auto p = Problem::make(cases[static_cast<std::size_t>(i)].spec);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    {
      ConcurrentMode mode(0);
      PA_ASSERT_OK((*p)->plan());
      PA_ASSERT_OK((*p)->run());
      PA_ASSERT_OK(cuda::device_synchronize());
      expected.push_back((*p)->out_bytes());
    }
    problems.push_back(std::move(p).value());
    auto st = cuda::testsupport::stream_create();
    ASSERT_TRUE(st.ok());
    streams.push_back(*st);
  }
  ConcurrentMode mode(1);  // each thread's prefill rows on that thread's second stream
  for (auto& pr : problems) PA_ASSERT_OK(pr->plan());
  constexpr int kIters = 50;
  std::vector<std::string> errors(2);
  testutil::run_together(2, [&](int i) {
    const auto u = static_cast<std::size_t>(i);
    for (int it = 0; it < kIters && errors[u].empty(); ++it) {
      Status st = problems[u]->poison_outputs();
      if (st.ok()) st = cuda::device_synchronize();
      if (st.ok()) st = problems[u]->run(streams[u]);
      if (st.ok()) st = cuda::testsupport::stream_synchronize(streams[u]);
      if (!st.ok()) errors[u] = "iteration " + std::to_string(it) + ": " + st.to_string();
      else if (problems[u]->out_bytes() != expected[u])
        errors[u] = "iteration " + std::to_string(it) + ": out differs from serial";
    }
  });
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  for (void* s : streams) cuda::testsupport::stream_destroy(s);
}

// The second stream stays in a capture it joined until that capture ends. A mixed batch run
// eagerly on another stream while that capture is open must not fork onto it (its work would
// land in the graph): it runs serially on its own stream, and the graph still replays right.
TEST(CudaMixedConcurrent, EagerCallDuringAnOpenCaptureDoesNotJoinIt) {
  PA_SKIP_WITHOUT_GPU();
  std::vector<MixedCase> cases = mixed_cases();
  auto captured = Problem::make(cases[0].spec);
  auto eager = Problem::make(cases[1].spec);
  ASSERT_TRUE(captured.ok() && eager.ok());
  Problem& pc = **captured;
  Problem& pe = **eager;
  auto s_capture = cuda::testsupport::stream_create();
  auto s_eager = cuda::testsupport::stream_create();
  ASSERT_TRUE(s_capture.ok() && s_eager.ok());
  ConcurrentMode mode(1);
  PA_ASSERT_OK(pc.plan());
  PA_ASSERT_OK(pe.plan());
  ASSERT_TRUE(reason_has(pe, "(its rows on a second stream"))
      << pe.attention_plan().choice().reason;
  // Both run once before the capture: their kernels are loaded, the second stream exists.
  PA_ASSERT_OK(pe.run(*s_eager));
  PA_ASSERT_OK(pc.run(*s_capture));
  PA_ASSERT_OK(cuda::device_synchronize());
  EXPECT_EQ(pc.check_against_oracle(), "");
  const auto expected = pc.out_bytes();
  PA_ASSERT_OK(pc.poison_outputs());
  PA_ASSERT_OK(pe.poison_outputs());
  PA_ASSERT_OK(cuda::device_synchronize());

  PA_ASSERT_OK(cuda::testsupport::capture_begin(*s_capture, /*relaxed=*/true));
  const std::int64_t f0 = cuda::forks_on_this_thread();
  const Status in_capture = pc.run(*s_capture);  // forks: the second stream joins the capture
  const std::int64_t f1 = cuda::forks_on_this_thread();
  const Status beside = pe.run(*s_eager);         // eager, while the capture is open
  const std::int64_t f2 = cuda::forks_on_this_thread();
  const Status synced = cuda::testsupport::stream_synchronize(*s_eager);
  auto exec = cuda::testsupport::capture_end(*s_capture);
  EXPECT_EQ(f1, f0 + 1) << "the captured call did not fork";
  EXPECT_EQ(f2, f1) << "the eager call forked onto a stream inside the open capture";
  PA_ASSERT_OK(in_capture);
  PA_ASSERT_OK(beside);
  PA_ASSERT_OK(synced);
  ASSERT_TRUE(exec.ok()) << exec.status().to_string();
  EXPECT_EQ(pe.check_against_oracle(), "") << "the eager call ran (serially) on its own stream";
  PA_ASSERT_OK(cuda::testsupport::graph_launch(*exec, *s_capture));
  PA_ASSERT_OK(cuda::testsupport::stream_synchronize(*s_capture));
  EXPECT_TRUE(pc.out_bytes() == expected) << "the replay differs from the eager run";
  cuda::testsupport::graph_destroy(*exec);
  cuda::testsupport::stream_destroy(*s_capture);
  cuda::testsupport::stream_destroy(*s_eager);
}

}  // namespace
}  // namespace pagedattn::cudatest
