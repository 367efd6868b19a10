// In-process Link: one mutex-protected queue of messages per direction (see local_link.h).
#include "distributed/transport/local_link.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <mutex>

#include "loom/error.h"

namespace loom::dist {
namespace {

// Messages from one rank to another, in sending order. `ready` is a semaphore eventfd whose count
// equals the number of queued messages (both change under `mu`), so it is readable exactly while a
// message waits: a receiver blocked in Comm::wait's poll() wakes at once instead of sleeping, which
// matters when tests run 8 rank threads on 2 cores. `size` lets the spinning receiver look without
// the lock or a system call.
struct Queue {
  Queue() : ready(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC | EFD_SEMAPHORE)) {}
  ~Queue() {
    if (ready >= 0) ::close(ready);
  }
  Queue(const Queue&) = delete;
  Queue& operator=(const Queue&) = delete;

  // Both with `mu` held.
  void push(const char* data, size_t bytes) {
    messages.emplace_back(data, data + bytes);
    size.fetch_add(1, std::memory_order_release);
    uint64_t one = 1;
    if (ready >= 0) (void)!::write(ready, &one, sizeof one);
  }
  void pop() {
    messages.pop_front();
    size.fetch_sub(1, std::memory_order_relaxed);
    uint64_t one;
    if (ready >= 0) (void)!::read(ready, &one, sizeof one);
  }

  std::mutex mu;
  std::deque<std::vector<char>> messages;  // GUARDED_BY(mu)
  std::atomic<size_t> size{0};
  std::atomic<bool> closed{false};  // either end closed its link
  const int ready;
};

struct Mesh {
  explicit Mesh(int size) : size(size), queues(new Queue[static_cast<size_t>(size) * size]) {}
  Queue& from_to(int from, int to) { return queues[static_cast<size_t>(from) * size + to]; }
  int size;
  std::unique_ptr<Queue[]> queues;
};

class LocalLink : public Link {
 public:
  LocalLink(std::shared_ptr<Mesh> mesh, int rank, int peer)
      : mesh_(std::move(mesh)),
        rank_(rank),
        peer_(peer),
        out_(mesh_->from_to(rank, peer)),
        in_(mesh_->from_to(peer, rank)) {}

  ~LocalLink() override { close(); }

  void post(Request* r) override {
    if (r->kind == Request::Recv) {
      recvs_.push_back(r);
      return;
    }
    std::lock_guard<std::mutex> lock(out_.mu);
    if (out_.closed || closed_) {
      failed_send_ = true;  // reported by the next progress()
      return;
    }
    out_.push(r->data, r->bytes);
    r->done = r->bytes;
    r->complete = true;
  }

  bool progress() override {
    LOOM_CHECK_AS(DistError, !closed_, "local link to rank ", peer_, " is closed");
    LOOM_CHECK_AS(DistError, !failed_send_, "rank ", peer_, " closed its local link; rank ", rank_,
                  " cannot send to it");
    if (recvs_.empty()) return false;
    if (in_.size.load(std::memory_order_acquire) == 0) {
      LOOM_CHECK_AS(DistError, !in_.closed, "rank ", peer_, " closed its local link");
      return false;
    }
    bool moved = false;
    std::lock_guard<std::mutex> lock(in_.mu);
    while (!recvs_.empty() && !in_.messages.empty()) {
      Request* r = recvs_.front();
      std::vector<char>& m = in_.messages.front();
      LOOM_CHECK_AS(DistError, m.size() == r->bytes, "rank ", peer_, " sent ", m.size(),
                    " bytes but rank ", rank_, " expected ", r->bytes);
      if (!m.empty()) std::memcpy(r->data, m.data(), m.size());
      r->done = r->bytes;
      r->complete = true;
      in_.pop();
      recvs_.pop_front();
      moved = true;
    }
    return moved;
  }

  bool has_pending() const override { return !recvs_.empty() || failed_send_; }
  bool add_poll_fds(std::vector<pollfd>& out) const override {
    // A closed queue is reported by progress(), which Comm calls often enough while polling.
    if (failed_send_ || in_.ready < 0 || in_.closed) return false;
    out.push_back(pollfd{in_.ready, POLLIN, 0});
    return true;
  }
  const char* kind() const override { return "local"; }

  void close() override {
    if (closed_) return;
    closed_ = true;
    out_.closed = true;
    in_.closed = true;
  }

 private:
  std::shared_ptr<Mesh> mesh_;
  int rank_;
  int peer_;
  Queue& out_;
  Queue& in_;
  std::deque<Request*> recvs_;  // posted, not yet matched, in posting order
  bool failed_send_ = false;
  bool closed_ = false;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> make_local_comms(int size) {
  LOOM_CHECK(size >= 1, "[dist] make_local_comms expected a size of at least 1 but got ", size);
  auto mesh = std::make_shared<Mesh>(size);
  cpu_set_t cpus;
  const int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  std::vector<std::unique_ptr<Comm>> comms;
  comms.reserve(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    std::vector<std::unique_ptr<Link>> links(static_cast<size_t>(size));
    for (int p = 0; p < size; ++p) {
      if (p != r) links[static_cast<size_t>(p)] = std::make_unique<LocalLink>(mesh, r, p);
    }
    comms.push_back(std::make_unique<Comm>(r, size, std::move(links)));
    // As ProcessGroup::create does: more ranks than cores yield instead of spinning (Note [Waiting]
    // in communicator.cpp); spinning rank threads would otherwise take the cores their peers need.
    comms.back()->set_oversubscribed(size > cores);
  }
  return comms;
}

}  // namespace loom::dist
