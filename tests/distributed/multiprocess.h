// Runs a test body in several real processes (fork), one per rank, joined by a FileStore in a fresh
// temporary directory. Each child's stderr is captured; a child that throws prints the message and
// exits 1. The parent reaps children as they exit (so a dead rank is seen as dead by its peers) and
// kills every child after the timeout.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/distributed/process_group.h"
#include "loom/distributed/store.h"

namespace loom::testing {

struct RankResult {
  int exit_code = -1;  // 128+sig when killed, -1 when timed out
  std::string output;  // stderr of the rank
};

inline std::string make_temp_dir() {
  std::string t =
      (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + std::string("/loom-dist-XXXXXX");
  std::vector<char> buf(t.begin(), t.end());
  buf.push_back('\0');
  char* d = ::mkdtemp(buf.data());
  return d ? std::string(d) : std::string("/tmp");
}

// fn(rank, store_path) runs in each child.
inline std::vector<RankResult> run_processes(int size,
                                             const std::function<void(int, const std::string&)>& fn,
                                             int timeout_s = 60) {
  std::string dir = make_temp_dir();
  std::string store_path = dir + "/store";
  std::vector<pid_t> pids(static_cast<size_t>(size));
  std::vector<int> fds(static_cast<size_t>(size));
  std::vector<RankResult> results(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    int p[2];
    if (::pipe(p) != 0) std::abort();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      ::dup2(p[1], 2);
      int code = 0;
      try {
        fn(r, store_path);
      } catch (const std::exception& e) {
        std::string m = std::string("rank ") + std::to_string(r) + " threw: " + e.what() + "\n";
        (void)!::write(2, m.data(), m.size());
        code = 1;
      }
      std::_Exit(code);
    }
    ::close(p[1]);
    ::fcntl(p[0], F_SETFL, O_NONBLOCK);
    pids[static_cast<size_t>(r)] = pid;
    fds[static_cast<size_t>(r)] = p[0];
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int alive = size;
  std::vector<bool> open(static_cast<size_t>(size), true);
  while (alive > 0 || std::find(open.begin(), open.end(), true) != open.end()) {
    for (int r = 0; r < size; ++r) {
      if (!open[static_cast<size_t>(r)]) continue;
      char buf[4096];
      for (;;) {
        ssize_t n = ::read(fds[static_cast<size_t>(r)], buf, sizeof(buf));
        if (n > 0) {
          results[static_cast<size_t>(r)].output.append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) {
          open[static_cast<size_t>(r)] = false;
          ::close(fds[static_cast<size_t>(r)]);
        }
        break;
      }
    }
    int status;
    pid_t w;
    while ((w = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < size; ++r) {
        if (pids[static_cast<size_t>(r)] == w) {
          results[static_cast<size_t>(r)].exit_code =
              WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          --alive;
        }
      }
    }
    if (std::chrono::steady_clock::now() > deadline) {
      for (int r = 0; r < size; ++r) {
        if (results[static_cast<size_t>(r)].exit_code == -1)
          ::kill(pids[static_cast<size_t>(r)], SIGKILL);
      }
      for (int r = 0; r < size; ++r) {
        if (results[static_cast<size_t>(r)].exit_code == -1) {
          ::waitpid(pids[static_cast<size_t>(r)], nullptr, 0);
          results[static_cast<size_t>(r)].output += "[timed out]";
        }
        if (open[static_cast<size_t>(r)]) ::close(fds[static_cast<size_t>(r)]);
      }
      break;
    }
    ::usleep(2000);
  }
  std::string cmd = "rm -rf '" + dir + "'";
  (void)!std::system(cmd.c_str());
  return results;
}

// A group over a FileStore for a test rank.
inline std::shared_ptr<dist::ProcessGroup> make_group(int rank, int size,
                                                      const std::string& store_path,
                                                      dist::ProcessGroupOptions o = {}) {
  auto store = std::make_shared<dist::FileStore>(store_path);
  if (o.timeout == dist::default_timeout()) o.timeout = std::chrono::seconds(20);
  store->set_timeout(o.timeout);
  return dist::ProcessGroup::create(store, rank, size, o);
}

// A check inside a child process: throws (the parent sees the message and exit code 1), since a
// gtest assertion in a forked child would not reach the parent.
#define CHILD_CHECK(cond, ...)                                                     \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::ostringstream os_;                                                      \
      os_ << __FILE__ << ":" << __LINE__ << ": " #cond " failed: " << __VA_ARGS__; \
      throw std::runtime_error(os_.str());                                         \
    }                                                                              \
  } while (0)

// Expects every rank to have exited 0, printing the outputs otherwise.
#define EXPECT_ALL_RANKS_OK(results)                                                        \
  for (size_t r_ = 0; r_ < (results).size(); ++r_) {                                        \
    EXPECT_EQ((results)[r_].exit_code, 0) << "rank " << r_ << ": " << (results)[r_].output; \
  }

}  // namespace loom::testing
