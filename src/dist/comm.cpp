// Comm: request bookkeeping and the progress loop shared by every transport.
#include "dist/comm.h"

#include <poll.h>
#include <sched.h>

#include <thread>

#include "loom/error.h"

namespace loom::dist {

Comm::Comm(int rank, int size, std::vector<std::unique_ptr<Link>> links)
    : rank_(rank), size_(size), links_(std::move(links)) {
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
// would cost several microseconds. After kSpin of idling it yields, and after kYield it blocks (poll()
// on TCP descriptors, short sleeps for memory links) so that a long wait (a peer still computing)
// gives the core back. When more ranks share the host than it has cores (oversubscribed), spinning
// steals the time slice of the very peer being waited for, so every idle iteration yields instead,
// as Open MPI does when oversubscribed.
void Comm::wait(Request* r) {
  if (r->complete) return;
  constexpr auto kSpin = std::chrono::microseconds(50);
  constexpr auto kYield = std::chrono::milliseconds(2);
  constexpr auto kYieldOversubscribed = std::chrono::milliseconds(20);
  int idle = 0;
  Clock::time_point idle_since{};
  Clock::duration idle_for{};
  std::vector<pollfd> fds;
  while (!r->complete) {
    if (closed_) fail(r->peer, "the group was aborted");
    if (progress_once()) {
      idle = 0;
      continue;
    }
    if ((idle++ & 63) == 0) {
      Clock::time_point now = Clock::now();
      if (idle == 1) idle_since = now;
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
    } else {
      if (idle_for < kSpin) continue;
      if (idle_for < kYield) {
        sched_yield();
        continue;
      }
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
      if (spin_links) sched_yield();
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
