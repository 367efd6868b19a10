// Comm: request bookkeeping and the progress loop shared by every transport.
#include "dist/comm.h"

#include <poll.h>
#include <sched.h>

#include <thread>

#include "loom/config.h"
#include "loom/error.h"

namespace loom::dist {

namespace {

std::chrono::microseconds spin_from_config() {
  static const bool declared = [] {
    config::declare("LOOM_DIST_SPIN_US", "1000",
                    "microseconds a waiting rank spins before it sleeps (Note [Waiting] in "
                    "src/dist/comm.cpp)");
    return true;
  }();
  (void)declared;
  const int64_t us = config::get_int("LOOM_DIST_SPIN_US", 1000);
  LOOM_CHECK(us >= 0, "[dist] LOOM_DIST_SPIN_US must be >= 0 but is ", us);
  return std::chrono::microseconds(us);
}

}  // namespace

Comm::Comm(int rank, int size, std::vector<std::unique_ptr<Link>> links)
    : rank_(rank), size_(size), links_(std::move(links)), spin_(spin_from_config()) {
  LOOM_INTERNAL_ASSERT(static_cast<int>(links_.size()) == size, "links for every rank");
}

Comm::~Comm() = default;

const char* Comm::link_kind(int peer) const {
  return peer == rank_ || !links_[static_cast<size_t>(peer)] ? "self"
                                                             : links_[static_cast<size_t>(peer)]->kind();
}

Request* Comm::isend(int peer, const void* data, size_t bytes) {
  LOOM_INTERNAL_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "send to rank ", peer, " from ",
                       rank_);
  if (closed_) fail(peer, "the group was aborted");
  requests_.push_back(Request{Request::kSend, peer, static_cast<char*>(const_cast<void*>(data)), bytes});
  Request* r = &requests_.back();
  links_[static_cast<size_t>(peer)]->post(r);
  return r;
}

Request* Comm::irecv(int peer, void* data, size_t bytes) {
  LOOM_INTERNAL_ASSERT(peer >= 0 && peer < size_ && peer != rank_, "recv from rank ", peer, " at ",
                       rank_);
  if (closed_) fail(peer, "the group was aborted");
  requests_.push_back(Request{Request::kRecv, peer, static_cast<char*>(data), bytes});
  Request* r = &requests_.back();
  links_[static_cast<size_t>(peer)]->post(r);
  return r;
}

void Comm::fail(int peer, const std::string& why) {
  std::string msg = detail::str_cat("[dist] ", context(), ": rank ", rank_, " lost rank ", peer, ": ", why);
  if (probe_) {
    std::string cause = probe_(probe_arg_);
    if (!cause.empty()) msg += " (" + cause + ")";
  }
  throw DistError(msg);
}

bool Comm::progress_once() {
  bool moved = false;
  for (int p = 0; p < size_; ++p) {
    Link* l = links_[static_cast<size_t>(p)].get();
    if (!l || !l->has_pending()) continue;
    try {
      moved |= l->progress();
    } catch (const DistError& e) {
      fail(p, e.what());
    }
  }
  return moved;
}

// Note [Waiting]
// A rank waiting for a peer spins on progress() while it has a core to itself: a shared-memory
// message arrives a few hundred nanoseconds after it is written, and a futex or poll() round trip
// would cost several microseconds. It spins for up to LOOM_DIST_SPIN_US (1 ms by default: longer
// than the waits inside a collective once every rank has joined it, such as a peer's copy of a
// 16 MiB message), then blocks (poll() on TCP descriptors, short sleeps for memory links), so
// that a long wait (a peer still computing) gives the core back. Sleeping sooner costs bandwidth:
// with a 50 us spin a 2-rank 16 MiB allreduce took 4.2-4.3 ms instead of 3.4-3.6 ms, as each
// sleep oversleeps by tens of microseconds.
// It never calls sched_yield() there. On a host shared with other busy processes (builds), Linux's
// scheduler (EEVDF) answers a yield by pushing the task's deadline a whole slice back: a rank that
// yields while its peer is preempted gives away its own turn too, and the two ranks seldom run at
// the same time again. With two CPU-bound processes beside two ranks on 2 cores, a 4 KiB allgather
// took 1.5 ms per call when waits yielded from 50 us on, and 4-7 us with spins then sleeps (Open
// MPI, which spins, took about 7 us). A task that sleeps keeps its claim and preempts the
// CPU-bound process when it wakes.
// When more ranks share the host than it has cores (oversubscribed), spinning steals the time slice
// of the very peer being waited for, so every idle iteration yields instead (the task that runs
// next is then usually that peer), as Open MPI does when oversubscribed.
bool Comm::test(Request* r) {
  if (!r || r->complete) return true;
  if (closed_) fail(r->peer, "the group was aborted");
  progress_once();
  return r->complete;
}

void Comm::wait(Request* r) {
  if (r->complete) return;
  constexpr auto kYieldOversubscribed = std::chrono::milliseconds(20);
  int idle = 0;
  Clock::time_point idle_since{};
  Clock::duration idle_for{};
  std::vector<pollfd> fds;
  while (!r->complete) {
    if (closed_) fail(r->peer, "the group was aborted");
    if (progress_once()) {
      idle = 0;
      idle_for = {};
      continue;
    }
    // The clock is read every 64 idle rounds, the first time after 64: a small message usually
    // lands within a few rounds, and a clock read (~50 ns here) on every wait was a visible part
    // of a 4 KiB collective.
    if ((++idle & 63) == 0) {
      Clock::time_point now = Clock::now();
      if (idle == 64) idle_since = now;
      idle_for = now - idle_since;
      if (now > deadline_) {
        fail(r->peer, detail::str_cat("timed out waiting to ", r->kind == Request::kSend ? "send " : "receive ",
                                      r->bytes, " bytes (", r->done, " moved)"));
      }
    }
    if (oversubscribed_) {
      if (idle_for < kYieldOversubscribed) {
        sched_yield();
        continue;
      }
    } else if (idle_for < spin_) {
      continue;
    }
    fds.clear();
    bool spin_links = false;
    for (int p = 0; p < size_; ++p) {
      Link* l = links_[static_cast<size_t>(p)].get();
      if (!l || !l->has_pending()) continue;
      if (!l->add_poll_fds(fds)) spin_links = true;
    }
    if (!fds.empty()) {
      ::poll(fds.data(), fds.size(), spin_links ? 0 : 1);
      if (spin_links) std::this_thread::sleep_for(std::chrono::microseconds(50));
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void Comm::wait_all() {
  for (Request& r : requests_) wait(&r);
}

void Comm::reset() { requests_.clear(); }

void Comm::set_context(std::string what, Clock::time_point deadline) {
  context_ = std::move(what);
  describe_ = nullptr;
  deadline_ = deadline;
}

void Comm::set_context(std::string (*describe)(const void*), const void* arg, Clock::time_point deadline) {
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
