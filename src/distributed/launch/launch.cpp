// The process launcher behind `loom launch` (see launch.h and Note [Launcher]).
#include "distributed/launch/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <optional>
#include <string>
#include <thread>

#include "distributed/settings.h"
#include "distributed/transport/shm_segments.h"
#include "loom/config.h"
#include "loom/error.h"

extern char** environ;

namespace loom::dist {

// Note [Launcher]
// The launcher is one thread around one poll() loop.
//  - Each worker is forked into its own process group, so that a signal reaches every process the
//    worker's shell starts, and a terminal's Ctrl-C reaches only the launcher, which forwards it.
//  - Worker stdout and stderr are pipes read by the loop; a line is written with one write() once
//    it is complete (or at EOF), so lines of different ranks never mix.
//  - Signals reach the loop through a self-pipe: the handlers only write the signal number.
//  - exec() failures travel back on a close-on-exec pipe: EOF means exec succeeded, an int is the
//    errno of the failure.
//  - A worker that exits is noticed with waitid(WNOWAIT) and left a zombie until the attempt
//    ends, so its process-group id cannot be recycled while we may still signal its leftovers.
//  - Children get PR_SET_PDEATHSIG(SIGKILL): if the launcher itself is SIGKILLed, they die too.

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kForwarded[] = {SIGINT, SIGTERM, SIGHUP};
constexpr size_t kMaxLine = 64 * 1024;  // a longer line without '\n' is emitted in pieces
constexpr int kPollMs = 200;
constexpr int kMaxGrace = 1000000;  // seconds; keeps the SIGKILL deadline's arithmetic in range

int g_signal_pipe[2] = {-1, -1};

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(signo);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

std::string errno_text(int err) {
  return std::strerror(err);
}

// Writes everything, retrying on EINTR and waiting when the fd is non-blocking and full. Output
// errors (a closed terminal) are ignored: the workers' fate must not depend on our stdout.
void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      pollfd pfd{fd, POLLOUT, 0};
      ::poll(&pfd, 1, 100);
    } else {
      return;
    }
  }
}

void say(const std::string& msg) {
  const std::string line = "[loom launch] " + msg + "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
}

// Installs the launcher's handlers for its lifetime; restores the previous ones after.
class SignalScope {
 public:
  SignalScope() {
    if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
      LOOM_THROW(DistError, "[loom launch] cannot create a pipe: ", errno_text(errno));
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (size_t i = 0; i < std::size(kForwarded); ++i) ::sigaction(kForwarded[i], &sa, &old_[i]);
    sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    ::sigaction(SIGCHLD, &sa, &old_chld_);
    struct sigaction ign {};
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    ::sigaction(SIGPIPE, &ign, &old_pipe_);  // a closed stdout must not kill the launcher
  }
  ~SignalScope() {
    for (size_t i = 0; i < std::size(kForwarded); ++i)
      ::sigaction(kForwarded[i], &old_[i], nullptr);
    ::sigaction(SIGCHLD, &old_chld_, nullptr);
    ::sigaction(SIGPIPE, &old_pipe_, nullptr);
    ::close(g_signal_pipe[0]);
    ::close(g_signal_pipe[1]);
    g_signal_pipe[0] = g_signal_pipe[1] = -1;
  }
  SignalScope(const SignalScope&) = delete;
  SignalScope& operator=(const SignalScope&) = delete;

  // Signal numbers received since the last call.
  static std::vector<int> drain() {
    std::vector<int> out;
    unsigned char buf[64];
    ssize_t n;
    while ((n = ::read(g_signal_pipe[0], buf, sizeof(buf))) > 0)
      out.insert(out.end(), buf, buf + n);
    return out;
  }

 private:
  struct sigaction old_[std::size(kForwarded)]{};
  struct sigaction old_chld_ {};
  struct sigaction old_pipe_ {};
};

// One worker output stream: a pipe read end, the line being assembled, where lines go.
struct Stream {
  int fd = -1;      // non-blocking read end; -1 once closed
  int out_fd = -1;  // STDOUT_FILENO or STDERR_FILENO
  int log_fd = -1;  // raw copy under --log-dir, or -1
  std::string prefix;
  std::string partial;

  void emit(const char* p, size_t n) {
    std::string line;
    line.reserve(prefix.size() + n + 1);
    line.append(prefix).append(p, n).push_back('\n');
    write_all(out_fd, line.data(), line.size());
    if (log_fd >= 0) write_all(log_fd, line.data() + prefix.size(), line.size() - prefix.size());
  }

  // Reads what is available and emits complete lines. At EOF, emits the partial line and closes.
  void pump() {
    char buf[65536];
    for (int round = 0; fd >= 0 && round < 16; ++round) {
      ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) return;
      if (n <= 0) {  // EOF or a read error: this stream is over
        close();
        return;
      }
      partial.append(buf, static_cast<size_t>(n));
      size_t start = 0;
      for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1) {
        emit(partial.data() + start, nl - start);
      }
      partial.erase(0, start);
      while (partial.size() >= kMaxLine) {
        emit(partial.data(), kMaxLine);
        partial.erase(0, kMaxLine);
      }
    }
  }

  void close() {
    if (!partial.empty()) emit(partial.data(), partial.size());
    partial.clear();
    if (fd >= 0) ::close(fd);
    if (log_fd >= 0) ::close(log_fd);
    fd = log_fd = -1;
  }
};

enum class WorkerState { NotStarted, Running, Exited, Reaped };

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  WorkerState state = WorkerState::NotStarted;
  int exit_code = 0;    // valid when Exited/Reaped and !signal
  int term_signal = 0;  // non-zero when killed by a signal
  Stream out, err;

  bool failed() const { return term_signal != 0 || exit_code != 0; }
  int status_code() const { return term_signal ? 128 + term_signal : exit_code; }
  std::string how() const {
    return term_signal ? "was killed by " + signal_name(term_signal)
                       : "exited with code " + std::to_string(exit_code);
  }
  // The group may be signalled while its leader is running or an unreaped zombie.
  void signal_group(int sig) const {
    if (state == WorkerState::Running || state == WorkerState::Exited) ::kill(-pid, sig);
  }
};

// Free TCP port on this machine: bind port 0, read what the kernel chose, close.
int pick_free_port() {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) LOOM_THROW(DistError, "[loom launch] cannot create a socket: ", errno_text(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const int err = errno;
    ::close(s);
    LOOM_THROW(DistError,
               "[loom launch] cannot pick a free port for MASTER_PORT: ", errno_text(err));
  }
  ::close(s);
  return ntohs(addr.sin_port);
}

std::string make_run_id() {
  if (std::string env = settings::kRunId.get(); !env.empty()) return env;
  const auto t = static_cast<unsigned long long>(Clock::now().time_since_epoch().count());
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%06llx%05x", t & 0xffffffULL,
                static_cast<unsigned>(::getpid()) & 0xfffffU);
  return buf;
}

double grace_seconds(const LaunchOptions& o) {
  if (o.grace_seconds >= 0) return o.grace_seconds;
  return settings::kLaunchGrace.get();  // from 0 to kMaxGrace
}

// Makes sure fds 0-2 are open, so that pipes never land on them (dup2 onto itself keeps CLOEXEC).
void ensure_std_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) < 0) {
      int n = ::open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) ::close(n);
    }
  }
}

struct Environment {
  std::vector<std::string> strings;
  std::vector<char*> ptrs;
};

Environment worker_environment(const LaunchOptions& o, const Worker& w, int port, int restart,
                               const std::string& run_id) {
  const std::vector<std::pair<std::string, std::string>> ours = {
      {"RANK", std::to_string(w.rank)},
      {"WORLD_SIZE", std::to_string(o.nnodes * o.nproc)},
      {"LOCAL_RANK", std::to_string(w.local_rank)},
      {"LOCAL_WORLD_SIZE", std::to_string(o.nproc)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"LOOM_RESTART_COUNT", std::to_string(restart)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart)},
      {"LOOM_RUN_ID", run_id},
  };
  Environment env;
  // Split the cores between the local workers unless the user chose (loom's pool and OpenMP/BLAS
  // pools at full width in every worker would oversubscribe the machine).
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  std::string per_worker = std::to_string(std::max(1u, cores / static_cast<unsigned>(o.nproc)));
  // LOOM_NUM_THREADS through the config registry: a bad value stops the launch naming it, and one
  // set through the API reaches the workers too. OMP_NUM_THREADS is OpenMP's.
  const std::string threads = config::get("LOOM_NUM_THREADS");
  env.strings.push_back("LOOM_NUM_THREADS=" + (threads.empty() ? per_worker : threads));
  if (!std::getenv("OMP_NUM_THREADS")) env.strings.push_back("OMP_NUM_THREADS=" + per_worker);
  for (char** e = environ; e && *e; ++e) {
    std::string_view kv(*e);
    std::string_view key = kv.substr(0, kv.find('='));
    bool overridden =
        key == "LOOM_NUM_THREADS" ||
        std::any_of(ours.begin(), ours.end(), [&](auto& p) { return p.first == key; });
    if (!overridden) env.strings.emplace_back(kv);
  }
  for (const auto& [k, v] : ours) env.strings.push_back(k + "=" + v);
  for (auto& s : env.strings) env.ptrs.push_back(s.data());
  env.ptrs.push_back(nullptr);
  return env;
}

int open_log(const std::string& dir, int attempt, int rank, const char* stream) {
  std::filesystem::path d = std::filesystem::path(dir) / ("attempt_" + std::to_string(attempt));
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  LOOM_CHECK(!ec, "[loom launch] cannot create the log directory '", d.string(),
             "': ", ec.message());
  std::string path = (d / ("rank_" + std::to_string(rank) + "." + stream)).string();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(fd >= 0, "[loom launch] cannot open the log file '", path, "': ", errno_text(errno));
  return fd;
}

void close_pair(int p[2]) {
  for (int i = 0; i < 2; ++i) {
    if (p[i] >= 0) ::close(p[i]);
    p[i] = -1;
  }
}

// One attempt: start every worker, run the loop until all have exited, reap them.
class Attempt {
 public:
  Attempt(const LaunchOptions& o, int restart, int port, const std::string& run_id, double grace)
      : o_(o), restart_(restart), port_(port), run_id_(run_id), grace_(grace) {
    workers_.resize(static_cast<size_t>(o.nproc));
  }

  // Kills and reaps whatever is left (also on exceptions).
  ~Attempt() {
    for (Worker& w : workers_) {
      w.signal_group(SIGKILL);
      if (w.state == WorkerState::Running || w.state == WorkerState::Exited) {
        while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        w.state = WorkerState::Reaped;
      }
      w.out.close();
      w.err.close();
    }
  }
  Attempt(const Attempt&) = delete;
  Attempt& operator=(const Attempt&) = delete;

  // Returns the launcher's exit status for this attempt (see launch() in launch.h).
  int run() {
    for (int i = 0; i < o_.nproc; ++i) {
      if (int err = spawn(workers_[static_cast<size_t>(i)], i)) {
        // 126/127 as in the shell: found but not runnable / not found.
        const int code = (err == ENOENT || err == ENOTDIR) ? 127 : 126;
        say("cannot run '" + o_.command[0] + "': " + errno_text(err));
        stop(SIGTERM);
        loop();
        return finish(code);
      }
    }
    loop();
    if (signal_) return finish(128 + signal_);
    if (failed_) return finish(*failed_);
    return finish(0);
  }

  bool worker_failed() const { return failed_.has_value() && signal_ == 0; }

 private:
  // Returns 0, or the errno of a failed exec (the child is then reaped).
  int spawn(Worker& w, int local_rank) {
    w.local_rank = local_rank;
    w.rank = o_.node_rank * o_.nproc + local_rank;
    Environment env = worker_environment(o_, w, port_, restart_, run_id_);
    std::vector<char*> argv;
    for (const auto& a : o_.command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    if (!o_.log_dir.empty()) {  // (the destructor closes them if the second one throws)
      w.out.log_fd = open_log(o_.log_dir, restart_, w.rank, "stdout");
      w.err.log_fd = open_log(o_.log_dir, restart_, w.rank, "stderr");
    }

    int out[2] = {-1, -1}, err[2] = {-1, -1}, exec_pipe[2] = {-1, -1};
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0 ||
        ::pipe2(exec_pipe, O_CLOEXEC) != 0) {
      const int e = errno;
      close_pair(out), close_pair(err), close_pair(exec_pipe);
      LOOM_THROW(DistError, "[loom launch] cannot create pipes for rank ", w.rank, ": ",
                 errno_text(e));
    }
    const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const pid_t parent = ::getpid();

    // Block our signals across fork so that the child never runs the launcher's handlers.
    sigset_t block, old;
    sigemptyset(&block);
    for (int s : kForwarded) sigaddset(&block, s);
    sigaddset(&block, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &block, &old);
    const pid_t pid = ::fork();
    if (pid == 0) {  // child: async-signal-safe calls only
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int s : kForwarded) ::sigaction(s, &dfl, nullptr);
      ::sigaction(SIGCHLD, &dfl, nullptr);
      ::sigaction(SIGPIPE, &dfl, nullptr);
      ::sigprocmask(SIG_SETMASK, &old, nullptr);
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
      ::dup2(out[1], STDOUT_FILENO);
      ::dup2(err[1], STDERR_FILENO);
      ::execvpe(argv[0], argv.data(), env.ptrs.data());
      const int e = errno;
      [[maybe_unused]] ssize_t n = ::write(exec_pipe[1], &e, sizeof(e));
      ::_exit(127);
    }
    const int fork_errno = errno;
    if (pid > 0) ::setpgid(pid, pid);  // also here, so that the group exists before we signal it
    ::sigprocmask(SIG_SETMASK, &old, nullptr);
    if (devnull >= 0) ::close(devnull);
    ::close(out[1]), ::close(err[1]), ::close(exec_pipe[1]);
    if (pid < 0) {
      ::close(out[0]), ::close(err[0]), ::close(exec_pipe[0]);
      LOOM_THROW(DistError, "[loom launch] cannot start rank ", w.rank,
                 ": fork failed: ", errno_text(fork_errno));
    }
    w.pid = pid;
    w.state = WorkerState::Running;
    const std::string prefix = "[rank" + std::to_string(w.rank) + "]: ";
    w.out = Stream{out[0], STDOUT_FILENO, w.out.log_fd, prefix, {}};
    w.err = Stream{err[0], STDERR_FILENO, w.err.log_fd, prefix, {}};
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);

    int exec_errno = 0;
    ssize_t n;
    while ((n = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
    }
    ::close(exec_pipe[0]);
    if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
      w.state = WorkerState::Reaped;
      w.out.close();
      w.err.close();
      return exec_errno;
    }
    return 0;
  }

  bool any_running() const {
    return std::any_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.state == WorkerState::Running; });
  }

  // Sends `sig` to every running worker's group and arms the SIGKILL deadline.
  void stop(int sig) {
    for (Worker& w : workers_) {
      if (w.state == WorkerState::Running) w.signal_group(sig);
    }
    stopping_ = true;
    if (!kill_deadline_) {
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(grace_));
    }
  }

  void on_launcher_signal(int sig) {
    if (signal_ == 0) {
      signal_ = sig;
      say("got " + signal_name(sig) + ", forwarding it to the workers (SIGKILL after " +
          format_seconds(grace_) + " s)");
      for (Worker& w : workers_) {
        if (w.state == WorkerState::Running) w.signal_group(sig);
      }
      stopping_ = true;
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(grace_));
    } else if (any_running()) {
      say("got " + signal_name(sig) + " again, killing the workers");
      kill_running();
    }
  }

  void kill_running() {
    for (Worker& w : workers_) {
      if (w.state == WorkerState::Running) w.signal_group(SIGKILL);
    }
  }

  // Notices exited workers without reaping them (Note [Launcher]).
  void check_exits() {
    for (Worker& w : workers_) {
      if (w.state != WorkerState::Running) continue;
      siginfo_t si{};
      if (::waitid(P_PID, static_cast<id_t>(w.pid), &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
          si.si_pid == 0) {
        continue;
      }
      w.state = WorkerState::Exited;
      if (si.si_code == CLD_EXITED) {
        w.exit_code = si.si_status;
      } else {
        w.term_signal = si.si_status;
      }
      // Everything the worker wrote is in its pipes now: show it before any verdict.
      w.out.pump();
      w.err.pump();
      if (w.failed() && !stopping_) {
        failed_ = w.status_code();
        say("rank " + std::to_string(w.rank) + " (pid " + std::to_string(w.pid) + ") " + w.how());
        if (any_running()) stop(SIGTERM);
        stopping_ = true;
      }
    }
  }

  void loop() {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    while (any_running()) {
      fds.assign(1, pollfd{g_signal_pipe[0], POLLIN, 0});
      streams.assign(1, nullptr);
      for (Worker& w : workers_) {
        for (Stream* s : {&w.out, &w.err}) {
          if (s->fd >= 0) {
            fds.push_back(pollfd{s->fd, POLLIN, 0});
            streams.push_back(s);
          }
        }
      }
      int timeout = kPollMs;
      if (kill_deadline_) {
        auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(*kill_deadline_ - Clock::now());
        timeout = static_cast<int>(std::clamp<int64_t>(left.count() + 1, 0, kPollMs));
      }
      int r = ::poll(fds.data(), fds.size(), timeout);
      if (r < 0 && errno != EINTR) {
        LOOM_THROW(DistError, "[loom launch] poll failed: ", errno_text(errno));
      }
      for (size_t i = 1; r > 0 && i < fds.size(); ++i) {
        if (fds[i].revents) streams[i]->pump();
      }
      for (int sig : SignalScope::drain()) {
        if (sig != SIGCHLD) on_launcher_signal(sig);
      }
      check_exits();
      if (kill_deadline_ && Clock::now() >= *kill_deadline_ && any_running()) {
        int alive = 0;
        for (const Worker& w : workers_) alive += w.state == WorkerState::Running;
        say(std::to_string(alive) + " worker(s) still running " + format_seconds(grace_) +
            " s after the stop signal (LOOM_LAUNCH_GRACE); sending SIGKILL");
        kill_running();
        kill_deadline_.reset();
      }
    }
  }

  // Kills leftovers of stopped groups, reaps every worker, flushes and closes their streams.
  int finish(int code) {
    for (Worker& w : workers_) {
      if (stopping_) w.signal_group(SIGKILL);
      w.out.pump();
      w.err.pump();
      if (w.state == WorkerState::Exited) {
        while (::waitpid(w.pid, nullptr, 0) < 0 && errno == EINTR) {
        }
        w.state = WorkerState::Reaped;
      }
      w.out.close();
      w.err.close();
    }
    return code;
  }

  static std::string format_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", s);
    return buf;
  }

  const LaunchOptions& o_;
  const int restart_;
  const int port_;
  const std::string& run_id_;
  const double grace_;
  std::vector<Worker> workers_;
  bool stopping_ = false;
  int signal_ = 0;             // the launcher's own SIGINT/SIGTERM/SIGHUP, once received
  std::optional<int> failed_;  // status code of the first failed worker
  std::optional<Clock::time_point> kill_deadline_;
};

}  // namespace

void validate(const LaunchOptions& o) {
  LOOM_CHECK(o.nproc >= 1, "[loom launch] --nproc must be a positive number of workers but got ",
             o.nproc);
  LOOM_CHECK(o.nproc <= 4096, "[loom launch] --nproc ", o.nproc,
             " is more than the 4096 workers one launcher supports");
  LOOM_CHECK(o.nnodes >= 1, "[loom launch] --nnodes must be at least 1 but got ", o.nnodes);
  LOOM_CHECK(o.node_rank >= 0 && o.node_rank < o.nnodes,
             "[loom launch] --node-rank must be in [0, ", o.nnodes, ") for --nnodes ", o.nnodes,
             " but got ", o.node_rank);
  LOOM_CHECK(static_cast<int64_t>(o.nnodes) * o.nproc <= (int64_t{1} << 30),
             "[loom launch] WORLD_SIZE = nnodes * nproc = ",
             static_cast<int64_t>(o.nnodes) * o.nproc, " is too large");
  LOOM_CHECK(o.master_port >= 0 && o.master_port <= 65535,
             "[loom launch] --master-port must be in [1, 65535] (or 0 to choose) but got ",
             o.master_port);
  LOOM_CHECK(!o.master_addr.empty(), "[loom launch] --master-addr must not be empty");
  LOOM_CHECK(!(o.grace_seconds > kMaxGrace), "[loom launch] the grace period must be at most ",
             kMaxGrace, " seconds but got ", o.grace_seconds);
  LOOM_CHECK(o.max_restarts >= 0, "[loom launch] --max-restarts must be >= 0 but got ",
             o.max_restarts);
  LOOM_CHECK(!o.command.empty() && !o.command[0].empty(),
             "[loom launch] no worker command: put it after `--`, e.g. "
             "loom launch --nproc 2 -- ./train --epochs 1");
}

int launch(const LaunchOptions& o) {
  validate(o);
  const double grace = grace_seconds(o);
  const std::string run_id = o.run_id.empty() ? make_run_id() : o.run_id;
  ensure_std_fds();
  SignalScope signals;
  for (int restart = 0;; ++restart) {
    // A fresh free port per attempt: the last attempt's listener may still hold the old one.
    const int port = o.master_port ? o.master_port : (o.nnodes == 1 ? pick_free_port() : 29500);
    const int first = o.node_rank * o.nproc;
    const std::string ranks =
        o.nproc == 1 ? "rank " + std::to_string(first)
                     : "ranks " + std::to_string(first) + "-" + std::to_string(first + o.nproc - 1);
    say("starting " + std::to_string(o.nproc) + " worker(s): " + ranks + " of " +
        std::to_string(o.nnodes * o.nproc) + ", MASTER_ADDR=" + o.master_addr +
        " MASTER_PORT=" + std::to_string(port) + ", run id " + run_id +
        (restart ? ", restart " + std::to_string(restart) : ""));
    Attempt attempt(o, restart, port, run_id, grace);
    const int code = attempt.run();
    // Workers killed while their group connected leave shared-memory segments (Note [Orphaned
    // segments]); every worker of the attempt is reaped by now.
    if (const std::string swept = describe(remove_orphan_segments()); !swept.empty()) say(swept);
    if (!attempt.worker_failed()) return code;
    if (restart >= o.max_restarts) {
      if (o.max_restarts > 0) {
        say("no restarts left (" + std::to_string(o.max_restarts) + " used); exiting with " +
            std::to_string(code));
      }
      return code;
    }
    say("restarting the group (" + std::to_string(restart + 1) + "/" +
        std::to_string(o.max_restarts) + ")");
  }
}

}  // namespace loom::dist
