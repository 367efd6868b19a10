// SIGTERM and SIGINT in processes with process groups (see signal_abort.h).
//
// Note [Stop signals]
// A rank blocked in a collective, waiting for a peer that never comes, must still stop promptly
// when told to (the launcher's SIGTERM, a Ctrl-C), and leave its flight record behind: that record
// is what says which collective it waited in. So ProcessGroup::create installs handlers for SIGTERM
// and SIGINT where their disposition is still the default:
//  - The handler only does what is async-signal-safe: it stores the signal in an atomic and writes
//    an eventfd. A thread of loom's ("watcher", every signal blocked in it) reads the eventfd and
//    aborts every live group (Comm::request_abort: a flag every wait loop checks, and a futex wake
//    of the doorbell a shared-memory wait sleeps on; TCP waits poll in 1 ms steps).
//  - The collective that was waiting throws DistError "... aborted by SIGTERM (while waiting for
//    rank 1)" naming itself and its sequence number; its failure path writes the flight record
//    (LOOM_FLIGHT_DIR), prints the error and ends the process by the signal (status 128 + signo),
//    as the default action would have. The watcher writes the records of groups with no collective
//    running and ends the process itself if no collective does within a few seconds.
//  - A second signal while the first is handled ends the process at once.
// An application that installs its own handler (before or after the group is created) keeps it:
// loom then does nothing on these signals unless that handler calls
// abort_process_groups_from_signal(sig), which aborts the groups the same way but leaves the
// process running, so that the application catches the DistError and decides (`loom train` stops
// between steps and saves a checkpoint). A disposition of SIG_IGN (a shell's background job) is
// left alone too. A process forked from one with groups has no watcher: its handler falls back to
// the default action until it creates a group of its own.
#include "distributed/group/signal_abort.h"

#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "distributed/group/process_group_impl.h"

namespace loom::dist {
namespace {

constexpr int kStopSignals[] = {SIGTERM, SIGINT};
// How long the watcher waits for a running collective to fail (and end the process) before it
// ends the process itself.
constexpr auto kCollectiveExitWait = std::chrono::seconds(5);

std::atomic<int> g_signal{0};       // the first stop signal (received or requested)
std::atomic<bool> g_exit{false};    // received by loom's handler: the process exits by it
std::atomic<int> g_wake_fd{-1};     // the watcher reads it
std::atomic<pid_t> g_owner_pid{0};  // the process whose watcher reads g_wake_fd
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<bool>::is_always_lock_free &&
              std::atomic<pid_t>::is_always_lock_free);

// Never destroyed: a group destroyed by a static destructor at exit still unregisters.
std::mutex& registry_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::vector<ProcessGroup::Impl*>& registry() {  // GUARDED_BY(registry_mu())
  static auto* groups = new std::vector<ProcessGroup::Impl*>();
  return *groups;
}

void default_action(int sig) {
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  ::raise(sig);
}

// Wakes the watcher of this process; false when there is none (no group yet, or a forked child).
bool wake_watcher(int sig) {
  const int fd = g_wake_fd.load();
  if (fd < 0 || g_owner_pid.load() != ::getpid()) return false;
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
  return true;
}

void on_stop_signal(int sig) {
  const int saved = errno;
  if (g_exit.exchange(true) || g_signal.load() != 0 || !wake_watcher(sig)) {
    default_action(sig);  // a second signal, or no watcher to act on it
  }
  errno = saved;
}

// Exit mode: abort every group, write the records of idle ones, and end the process unless a
// failing collective does first.
[[noreturn]] void abort_and_exit(int sig) {
  const std::string reason = "aborted by " + stop_signals::signal_name(sig);
  std::unique_lock<std::mutex> lock(registry_mu());  // groups stay alive until the process ends
  std::vector<ProcessGroup::Impl*> pending = registry();
  for (ProcessGroup::Impl* g : pending) g->abort_with(reason);
  const auto deadline = std::chrono::steady_clock::now() + kCollectiveExitWait;
  while (!pending.empty() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < pending.size();) {
      if (pending[i]->exec_mu.try_lock()) {  // no collective running: write its record here
        const std::string path = pending[i]->dump_flight(flight_dir());
        std::fprintf(stderr,
                     "[dist] rank %d of group '%s': %s outside a collective [flight record: %s]\n",
                     pending[i]->rank, pending[i]->name.c_str(), reason.c_str(),
                     path.empty() ? "not written" : path.c_str());
        pending[i]->exec_mu.unlock();
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
      } else {
        ++i;
      }
    }
    if (!pending.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!pending.empty()) {
    std::fprintf(stderr, "[dist] %s: a collective did not stop within %lld s; exiting anyway\n",
                 reason.c_str(), static_cast<long long>(kCollectiveExitWait.count()));
  }
  stop_signals::exit_by(sig);
}

void watch(int fd) {
  for (;;) {
    uint64_t v = 0;
    const ssize_t n = ::read(fd, &v, sizeof(v));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;
    const int sig = g_signal.load();
    if (sig == 0) continue;
    if (g_exit.load()) abort_and_exit(sig);
    // Requested by the application's handler: abort, and let the application decide.
    const std::string reason = "aborted by " + stop_signals::signal_name(sig);
    std::lock_guard<std::mutex> lock(registry_mu());
    for (ProcessGroup::Impl* g : registry()) g->abort_with(reason);
  }
}

// The first group of this process (or of a forked child) starts a watcher; the caller holds the
// registry's mutex.
void start_watcher() {
  const int fd = ::eventfd(0, EFD_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr,
                 "[dist] cannot create an eventfd (%s): SIGTERM and SIGINT will end this process "
                 "without aborting its process groups or writing flight records\n",
                 std::strerror(errno));
    return;
  }
  registry().clear();  // a forked child's copy of its parent's groups
  g_signal = 0;
  g_exit = false;
  // Every signal blocked in the watcher, so that the kernel never picks it to run a handler (and
  // an application's sigwait() thread still receives what it waits for).
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, &old);
  try {
    std::thread(watch, fd).detach();
  } catch (const std::system_error& e) {
    ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
    ::close(fd);
    std::fprintf(stderr,
                 "[dist] cannot start the signal thread (%s): SIGTERM and SIGINT will end "
                 "this process without writing flight records\n",
                 e.what());
    return;
  }
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  g_wake_fd = fd;
  g_owner_pid = ::getpid();
}

}  // namespace

void abort_process_groups_from_signal(int sig) noexcept {
  const int saved = errno;
  wake_watcher(sig);
  errno = saved;
}

namespace stop_signals {

void install() {
  std::lock_guard<std::mutex> lock(registry_mu());
  if (g_owner_pid.load() != ::getpid()) start_watcher();
  if (g_owner_pid.load() != ::getpid()) return;
  for (int sig : kStopSignals) {
    struct sigaction cur {};
    if (::sigaction(sig, nullptr, &cur) != 0) continue;
    if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) continue;  // the application's
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    ::sigaction(sig, &sa, nullptr);
  }
}

void add_group(ProcessGroup::Impl* group) {
  std::lock_guard<std::mutex> lock(registry_mu());
  registry().push_back(group);
}

void remove_group(ProcessGroup::Impl* group) {
  std::lock_guard<std::mutex> lock(registry_mu());
  auto& groups = registry();
  groups.erase(std::remove(groups.begin(), groups.end(), group), groups.end());
}

int exit_signal() {
  return g_exit.load() && g_owner_pid.load() == ::getpid() ? g_signal.load() : 0;
}

void exit_by(int sig) {
  std::fflush(nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(sig, &dfl, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  ::pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  ::raise(sig);
  ::_exit(128 + sig);
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

}  // namespace stop_signals
}  // namespace loom::dist
