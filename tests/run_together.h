// Shared by the CPU and CUDA concurrency tests: host threads whose calls overlap in time.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace pagedattn::testutil {

/// Start `n` threads running fn(i) for i in [0, n), released together once all have started
/// (so that their calls overlap rather than run one after another), and join them.
template <class Fn>
void run_together(int n, Fn fn) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      fn(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace pagedattn::testutil
