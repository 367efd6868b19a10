// Comm: request bookkeeping and the progress loop shared by every transport.
#include "distributed/transport/communicator.h"
#include "distributed/settings.h"

#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <thread>

#include "loom/config.h"
#include "loom/error.h"

namespace loom::dist {

namespace {

void futex_wake_all(std::atomic<uint32_t>* word) {
  ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr,
            0);
}

// A waiting budget in microseconds (Note [Waiting]).
std::chrono::microseconds wait_budget(const config::IntSetting& setting) {
  return std::chrono::microseconds(setting.get());
}

}  // namespace

void Doorbell::notify() {
  // Pairs with the sleeper's fetch_add on `sleepers` before its last look at the links: the
  // progress this rank published before the fence is seen by that look, or `sleepers` is seen here.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_relaxed) == 0) return;
  rings.fetch_add(1, std::memory_order_release);
  futex_wake_all(&rings);
}

bool Doorbell::sleep(uint32_t seen, std::chrono::microseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000),
              static_cast<long>(timeout.count() % 1000000) * 1000};
  // Not FUTEX_PRIVATE_FLAG: the word lives in memory shared with other processes.
  long rc =
      ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(&rings), FUTEX_WAIT, seen, &ts, nullptr, 0);
  return rc == 0 || errno != ETIMEDOUT;
}

Comm::Comm(int rank, int size, std::vector<std::unique_ptr<Link>> links)
    : rank_(rank),
      size_(size),
      world_rank_(rank),
      links_(std::move(links)),
      spin_(wait_budget(settings::kSpinUs)),
      yield_(wait_budget(settings::kYieldUs)) {
  LOOM_INTERNAL_ASSERT(static_cast<int>(links_.size()) == size, "links for every rank");
}

Comm::~Comm() = default;

void Comm::set_host_of(std::vector<int> host_of) {
  LOOM_INTERNAL_ASSERT(host_of.empty() || host_of.size() == links_.size(), "a host for every rank");
  host_of_ = std::move(host_of);
}

Comm::SubGroup::SubGroup(Comm& c, std::vector<int> members) : c_(c) {
  LOOM_INTERNAL_ASSERT(c.members_.empty(), "sub-groups do not nest");
  int me = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    LOOM_INTERNAL_ASSERT(members[i] >= 0 && members[i] < c.world_size(), "member ", members[i]);
    if (members[i] == c.world_rank_) me = static_cast<int>(i);
  }
  LOOM_INTERNAL_ASSERT(me >= 0, "rank ", c.world_rank_, " is not a member of its sub-group");
  c.rank_ = me;
  c.size_ = static_cast<int>(members.size());
  c.members_ = std::move(members);
}

Comm::SubGroup::~SubGroup() {
  c_.members_.clear();
  c_.rank_ = c_.world_rank_;
  c_.size_ = c_.world_size();
}

const char* Comm::link_kind(int peer) const {
  return peer == rank_ || !link(peer) ? "self" : link(peer)->kind();
}

Request* Comm::isend(int peer, const void* data, size_t bytes) {
  LOOM_INTERNAL_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "send to rank ", peer, " from ",
                       rank_);
  const int g = group_rank(peer);
  if (closed_) fail_aborted(g);
  requests_.push_back(
      Request{Request::Send, g, static_cast<char*>(const_cast<void*>(data)), bytes});
  Request* r = &requests_.back();
  links_[static_cast<size_t>(g)]->post(r);
  return r;
}

Request* Comm::irecv(int peer, void* data, size_t bytes) {
  LOOM_INTERNAL_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "recv from rank ", peer, " at ",
                       rank_);
  const int g = group_rank(peer);
  if (closed_) fail_aborted(g);
  requests_.push_back(Request{Request::Recv, g, static_cast<char*>(data), bytes});
  Request* r = &requests_.back();
  links_[static_cast<size_t>(g)]->post(r);
  return r;
}

void Comm::fail(int peer, const std::string& why) {
  std::string msg =
      detail::str_cat("[dist] ", context(), ": rank ", world_rank_, " lost rank ", peer, ": ", why);
  if (probe_) {
    std::string cause = probe_(probe_arg_);
    if (!cause.empty()) msg += " (" + cause + ")";
  }
  LOOM_THROW(DistError, msg);
}

void Comm::fail_aborted(int peer) {
  LOOM_THROW(DistError, "[dist] ", context(), ": rank ", world_rank_, ": ", abort_reason(),
             " (while waiting for rank ", peer, ")");
}

std::string Comm::abort_reason() const {
  std::lock_guard<std::mutex> g(abort_mu_);
  return abort_reason_.empty() ? std::string("the group was aborted") : abort_reason_;
}

// Runs `step` on every link with pending requests; a link's DistError names the peer and the
// running collective (fail).
bool Comm::each_pending(bool (Link::*step)()) {
  bool moved = false;
  for (int p = 0; p < world_size(); ++p) {
    Link* l = links_[static_cast<size_t>(p)].get();
    if (!l || !l->has_pending()) continue;
    try {
      moved |= (l->*step)();
    } catch (const DistError& e) {
      if (closed_) fail_aborted(p);  // aborted meanwhile: that is this rank's reason to stop
      fail(p, e.what());
    }
  }
  return moved;
}

bool Comm::progress_once() {
  return each_pending(&Link::progress);
}
bool Comm::help_once() {
  return each_pending(&Link::help);
}

// Note [Waiting]
// A rank waiting for a peer spins on progress() while it has a core to itself: a shared-memory
// message arrives a few hundred nanoseconds after it is written, and a futex or poll() round trip
// would cost several microseconds. It spins for up to LOOM_DIST_SPIN_US (1 ms by default: longer
// than the waits inside a collective once every rank has joined it, such as a peer's copy of a
// 16 MiB message), then blocks, so that a long wait (a peer still computing) gives the core back:
// on the doorbell when every pending link is shared memory (Note [Doorbells] in communicator.h), in
// poll() on TCP descriptors, else in short sleeps. Blocking sooner costs bandwidth on a virtual
// machine, even with a prompt wake-up: an idle vCPU is halted and waking it goes through the
// hypervisor. On the 2-core development VM a 2-rank 8 MiB allgather took a median 1.69 ms with a
// 200 us spin and 1.14 ms with 1 ms. Before doorbells, blocked memory links slept 50 us at a time,
// and a 50 us spin made a 2-rank 16 MiB allreduce 20 % slower; with doorbells a 100 us spin matched
// the 1 ms one there. It never calls sched_yield() there. On a host shared with other busy
// processes (builds), Linux's scheduler (EEVDF) answers a yield by pushing the task's deadline a
// whole slice back: a rank that yields while its peer is preempted gives away its own turn too, and
// the two ranks seldom run at the same time again. With two CPU-bound processes beside two ranks on
// 2 cores, a 4 KiB allgather took 1.5 ms per call when waits yielded from 50 us on, and 4-7 us with
// spins then sleeps (Open MPI, which spins, took about 7 us). A task that sleeps keeps its claim
// and preempts the CPU-bound process when it wakes. When more ranks share the host than it has
// cores (oversubscribed), spinning steals the time slice of the very peer being waited for, so an
// idle wait yields instead (the task that runs next is then usually that peer), as Open MPI does
// when oversubscribed, for up to LOOM_DIST_YIELD_US (1 ms), then blocks as above. A yielding rank
// is always runnable, so the kernel never sees its core idle and never moves a busy rank there;
// blocking after 1 ms rather than 20 ms (as before doorbells) took a 4-rank 4 MiB allreduce on 2
// cores from a median 4.66 to 4.07 ms (15 alternating runs).
bool Comm::test(Request* r) {
  if (!r || r->complete) return true;
  if (closed_) fail_aborted(r->peer);
  progress_once();
  return r->complete;
}

void Comm::wait(Request* r) {
  if (r->complete) return;
  int idle = 0;
  Clock::time_point idle_since{};
  Clock::duration idle_for{};
  std::vector<pollfd> fds;
  while (!r->complete) {
    if (closed_) fail_aborted(r->peer);
    // Helping a peer (a large message it reads) is looked for every 8 idle rounds, off the path
    // of small messages, which land within a few.
    if (progress_once() || ((idle & 7) == 0 && help_once())) {
      idle = 0;
      idle_since = {};
      idle_for = {};
      continue;
    }
    // A spinning wait reads the clock every 64 idle rounds: a small message usually lands within a
    // few rounds, and a clock read (~50 ns here) on every round was a visible part of a 4 KiB
    // collective. A yield takes microseconds, so a yielding wait reads it every round.
    if ((++idle & 63) == 0 || oversubscribed_) {
      Clock::time_point now = Clock::now();
      if (idle_since == Clock::time_point{}) idle_since = now;
      idle_for = now - idle_since;
      if (now > deadline_) {
        fail(r->peer, detail::str_cat("timed out waiting to ",
                                      r->kind == Request::Send ? "send " : "receive ", r->bytes,
                                      " bytes (", r->done, " moved)"));
      }
    }
    if (oversubscribed_) {
      if (idle_for < yield_) {
        sched_yield();
        continue;
      }
    } else if (idle_for < spin_) {
      continue;
    }
    block(r, fds);
  }
}

// Sleeps until a pending link may have moved: on the links' doorbell when they all have the same
// one (shared memory), else in poll() on their descriptors (TCP), else for a short while.
void Comm::block(Request* r, std::vector<pollfd>& fds) {
  fds.clear();
  Doorbell* bell = nullptr;
  bool same_bell = true, spin_links = false;
  for (int p = 0; p < world_size(); ++p) {
    Link* l = links_[static_cast<size_t>(p)].get();
    if (!l || !l->has_pending()) continue;
    Doorbell* b = l->doorbell();
    if (b == nullptr || (bell != nullptr && b != bell)) same_bell = false;
    if (b != nullptr && bell == nullptr) bell = b;
    if (!l->add_poll_fds(fds)) spin_links = true;
  }
  if (bell != nullptr && same_bell && fds.empty()) {
    const uint32_t seen = bell->rings.load(std::memory_order_acquire);
    bell->sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool rung = true;
    if (!progress_once() && !r->complete && !closed_) {
      auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline_ - Clock::now());
      rung = bell->sleep(seen, std::clamp(left, std::chrono::microseconds(1), kMaxSleep));
      ++sleeps_;
    }
    bell->sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (!rung) {
      ++sleep_timeouts_;
      check_alive();
    }
    return;
  }
  if (!fds.empty()) {
    ::poll(fds.data(), fds.size(), spin_links ? 0 : 1);
    if (spin_links) std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

uint64_t Comm::bytes_helped() const {
  uint64_t n = 0;
  for (const auto& l : links_) n += l ? l->bytes_helped() : 0;
  return n;
}

void Comm::check_alive() {
  for (int p = 0; p < world_size(); ++p) {
    Link* l = links_[static_cast<size_t>(p)].get();
    if (!l || !l->has_pending()) continue;
    try {
      l->check_alive();
    } catch (const DistError& e) {
      fail(p, e.what());
    }
  }
}

void Comm::request_abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> g(abort_mu_);
    if (abort_reason_.empty()) abort_reason_ = reason;  // the first reason stays
  }
  closed_.store(true);
  // Wake this rank's worker if it sleeps on a doorbell (rings it unconditionally).
  for (auto& l : links_) {
    Doorbell* b = l ? l->doorbell() : nullptr;
    if (b == nullptr) continue;
    b->rings.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(&b->rings);
    break;
  }
}

void Comm::wait_all() {
  for (Request& r : requests_) wait(&r);
}

void Comm::reset() {
  requests_.clear();
}

void Comm::set_context(std::string what, Clock::time_point deadline) {
  context_ = std::move(what);
  describe_ = nullptr;
  deadline_ = deadline;
}

void Comm::set_context(std::string (*describe)(const void*), const void* arg,
                       Clock::time_point deadline) {
  describe_ = describe;
  describe_arg_ = arg;
  deadline_ = deadline;
}

char* Comm::scratch(size_t bytes, int slot) {
  auto& s = scratch_[slot];
  if (s.size() < bytes) s.resize(bytes);
  return s.data();
}

void Comm::close_all() {
  closed_ = true;
  for (auto& l : links_) {
    if (l) l->close();
  }
}

}  // namespace loom::dist
