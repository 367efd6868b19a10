// Test helper: runs one function per rank of an in-process group (make_local_comms), each on its
// own thread. The first error any rank throws aborts the others and is rethrown by run_ranks.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "distributed/transport/communicator.h"
#include "distributed/transport/local_link.h"

namespace loom::testing {

inline void run_ranks(int size, const std::function<void(dist::Comm&)>& fn) {
  std::vector<std::unique_ptr<dist::Comm>> comms = dist::make_local_comms(size);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      dist::Comm& c = *comms[static_cast<size_t>(r)];
      // A hang becomes a DistError naming the rank instead of a stuck test.
      c.set_context("test", dist::Clock::now() + std::chrono::seconds(60));
      try {
        fn(c);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!first) {
          first = std::current_exception();
          for (auto& other : comms) other->request_abort();
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace loom::testing
