// Child processes of `loom bench` under a deadline (Note [bench deadlines] in job.h).
#include "job.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "loom/error.h"

namespace loom::bench {
namespace {

using Clock = std::chrono::steady_clock;

// A line longer than this is passed on in pieces (a child writing without newlines cannot grow the
// driver's memory without bound).
constexpr size_t kMaxLine = 64 << 10;

// Whether the child `pid` has ended, without reaping it (WNOWAIT): a zombie leader keeps its
// process group id reserved for our killpg.
bool ended(pid_t pid, ExitInfo* info) {
  siginfo_t si;
  std::memset(&si, 0, sizeof(si));
  if (::waitid(P_PID, static_cast<id_t>(pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
    // ECHILD: not ours to wait for (already reaped): treat it as ended.
    return errno == ECHILD;
  }
  if (si.si_pid != pid) return false;
  info->code = si.si_code;
  info->status = si.si_status;
  return true;
}

Clock::time_point after(Clock::time_point t, double seconds) {
  return t + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

struct Stream {
  int fd = -1;
  size_t process = 0;
  bool is_stderr = false;
  std::string pending;
};

}  // namespace

bool ExitInfo::clean() const {
  return code == CLD_EXITED && status == 0;
}

std::string ExitInfo::describe() const {
  if (code == CLD_EXITED) return "exited with status " + std::to_string(status);
  const char* abbrev = ::sigabbrev_np(status);
  std::string sig = abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(status);
  return "was killed by " + sig + (code == CLD_DUMPED ? " (core dumped)" : "");
}

int ExitInfo::cause_rank() const {
  if (code == CLD_EXITED || status == SIGPIPE) return 1;
  return 2;
}

std::string JobResult::reason(const std::string& where) const {
  const std::string at = where.empty() ? "" : " at " + where;
  if (timed_out) {
    char d[32];
    std::snprintf(d, sizeof(d), "%g", deadline_s);
    return std::string("timeout after ") + d + " s" + at;
  }
  if (failed < 0) return "";
  return failed_name + " " + exit.describe() + at +
         (last_stderr.empty() ? "" : " (" + last_stderr + ")") + also;
}

bool adopt_child(pid_t pgid, pid_t parent) {
  ::setpgid(0, pgid);
  ::signal(SIGPIPE, SIG_DFL);  // the driver ignores it (an anchor may die mid-query); children not
  // No orphans left spinning when the driver dies (the setting survives exec).
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  return ::getppid() == parent;
}

ExitInfo end_group(pid_t leader, double wait_s, double grace_s) {
  ExitInfo info;
  auto wait_until = [&](Clock::time_point t) {
    while (!ended(leader, &info)) {
      if (Clock::now() >= t) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  };
  const auto start = Clock::now();
  if (!wait_until(after(start, wait_s))) {
    ::killpg(leader, SIGTERM);
    if (!wait_until(after(Clock::now(), grace_s))) {
      ::killpg(leader, SIGKILL);
      wait_until(Clock::time_point::max());
    }
  }
  ::killpg(leader, SIGKILL);  // whatever the leader left behind in its group
  ::waitpid(leader, nullptr, 0);
  return info;
}

JobResult run_job(const std::vector<JobProcess>& processes, const JobOptions& options,
                  const LineFn& on_stdout, const LineFn& on_stderr) {
  const size_t n = processes.size();
  JobResult result;
  result.deadline_s = options.deadline_s;
  std::vector<int> fds;  // every pipe end we made, to close on the way out
  auto make_pipe = [&](int p[2]) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      const int e = errno;
      for (int fd : fds) ::close(fd);
      LOOM_THROW(DistError, "[bench] pipe: ", std::strerror(e));
    }
    fds.push_back(p[0]);
    fds.push_back(p[1]);
  };
  std::vector<std::array<int, 2>> out(n), err(n);
  int go[2];
  for (size_t i = 0; i < n; ++i) {
    make_pipe(out[i].data());
    make_pipe(err[i].data());
  }
  make_pipe(go);
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t parent = ::getpid();
  const auto start = Clock::now();
  pid_t pgid = 0;
  std::vector<pid_t> pids;
  for (size_t i = 0; i < n; ++i) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (!adopt_child(pgid, parent)) ::_exit(1);
      ::dup2(out[i][1], 1);
      ::dup2(err[i][1], 2);
      // Only our own ends stay open: a peer's write end held here would keep its pipe from EOF.
      for (int fd : fds) {
        if (fd != go[0]) ::close(fd);
      }
      // Wait for the go: every process is in the group before any runs (a process that ended at
      // once would otherwise take the group's id with it before the others joined).
      char c = 0;
      if (::read(go[0], &c, 1) != 1) ::_exit(1);
      ::close(go[0]);
      int rc = 1;
      try {
        rc = processes[i].body();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: %s\n", processes[i].name.c_str(), e.what());
      }
      std::fflush(stdout);
      std::fflush(stderr);
      ::_exit(rc);
    }
    if (pid < 0) {
      const int e = errno;
      for (int fd : fds) ::close(fd);  // the children read EOF instead of the go, and exit
      if (pgid > 0) end_group(pgid, 5, options.grace_s);
      for (pid_t p : pids) ::waitpid(p, nullptr, 0);
      LOOM_THROW(DistError, "[bench] fork: ", std::strerror(e));
    }
    if (pgid == 0) pgid = pid;
    ::setpgid(pid, pgid);  // here too, so the group exists whichever side runs first
    pids.push_back(pid);
  }
  std::vector<Stream> streams;
  for (size_t i = 0; i < n; ++i) {
    ::close(out[i][1]);
    ::close(err[i][1]);
    streams.push_back({out[i][0], i, false, {}});
    streams.push_back({err[i][0], i, true, {}});
  }
  ::close(go[0]);
  const std::string gos(n, 'g');
  if (::write(go[1], gos.data(), gos.size()) != static_cast<ssize_t>(gos.size())) {
    // Cannot happen with a fresh pipe of n < 64 KiB bytes; the children then see EOF and exit.
  }
  ::close(go[1]);

  std::vector<std::string> last_line(n);
  std::vector<std::pair<size_t, ExitInfo>> also;  // failed in the same sweep as the one named
  std::vector<bool> done(n, false);
  size_t n_done = 0;
  const auto deadline = after(start, options.deadline_s);
  Clock::time_point stop_at{}, all_done_at{};
  bool stopping = false, killed = false;
  auto emit = [&](Stream& s, const std::string& line) {
    if (s.is_stderr) {
      if (!line.empty()) last_line[s.process] = line;
      if (on_stderr) on_stderr(s.process, line);
    } else if (on_stdout) {
      on_stdout(s.process, line);
    }
  };
  auto stop = [&] {
    stopping = true;
    stop_at = Clock::now();
    ::killpg(pgid, SIGTERM);
  };
  for (;;) {
    std::vector<pollfd> pfds;
    std::vector<Stream*> polled;
    for (Stream& s : streams) {
      if (s.fd < 0) continue;
      pfds.push_back({s.fd, POLLIN, 0});
      polled.push_back(&s);
    }
    if (pfds.empty() && n_done == n) break;
    // Every process ended but a straggler of the group (a child of a rank) holds a pipe: give it a
    // second, then stop reading.
    if (n_done == n && Clock::now() - all_done_at > std::chrono::seconds(1)) break;
    if (pfds.empty()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    } else if (::poll(pfds.data(), pfds.size(), 50) > 0) {
      for (size_t k = 0; k < pfds.size(); ++k) {
        if (!(pfds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        Stream& s = *polled[k];
        char buf[16384];
        const ssize_t r = ::read(s.fd, buf, sizeof(buf));
        if (r > 0) {
          s.pending.append(buf, static_cast<size_t>(r));
          size_t nl;
          while ((nl = s.pending.find('\n')) != std::string::npos) {
            emit(s, s.pending.substr(0, nl));
            s.pending.erase(0, nl + 1);
          }
          if (s.pending.size() > kMaxLine) {
            emit(s, s.pending);
            s.pending.clear();
          }
        } else if (r == 0 || errno != EINTR) {
          if (!s.pending.empty()) emit(s, s.pending);
          s.pending.clear();
          ::close(s.fd);
          s.fd = -1;
        }
      }
    }
    // The first to fail on its own is the one to name; those we stopped are not. Failures found in
    // the same sweep cannot be ordered by time: one killed by a signal goes first (a crash is more
    // often the cause than the reaction), except SIGPIPE, which a write to the crashed peer raises
    // (ExitInfo::cause_rank); the others are named after it.
    std::vector<std::pair<size_t, ExitInfo>> failed_now;
    for (size_t i = 0; i < n; ++i) {
      ExitInfo info;
      if (done[i] || !ended(pids[i], &info)) continue;
      done[i] = true;
      if (++n_done == n) all_done_at = Clock::now();
      if (!info.clean() && !stopping) failed_now.emplace_back(i, info);
    }
    if (!failed_now.empty()) {
      std::stable_sort(failed_now.begin(), failed_now.end(), [](const auto& a, const auto& b) {
        return a.second.cause_rank() > b.second.cause_rank();
      });
      result.failed = static_cast<int>(failed_now[0].first);
      result.failed_name = processes[failed_now[0].first].name;
      result.exit = failed_now[0].second;
      for (size_t k = 1; k < failed_now.size(); ++k) also.push_back(failed_now[k]);
      stop();
    }
    if (!stopping && n_done < n && Clock::now() > deadline) {
      result.timed_out = true;
      stop();
    }
    if (stopping && !killed &&
        Clock::now() - stop_at > std::chrono::duration<double>(options.grace_s)) {
      killed = true;
      ::killpg(pgid, SIGKILL);
    }
  }
  // Collect what the failed process said last (its pipe may have been read after it ended).
  if (result.failed >= 0) {
    result.last_stderr = last_line[static_cast<size_t>(result.failed)];
  }
  for (const auto& [i, info] : also) {
    result.also += "; " + processes[i].name + " " + info.describe() +
                   (last_line[i].empty() ? "" : " (" + last_line[i] + ")");
  }
  ::killpg(pgid, SIGKILL);  // stragglers; the leader is not reaped yet, so the id is still ours
  for (Stream& s : streams) {
    if (s.fd >= 0) ::close(s.fd);
  }
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace loom::bench
