// io_uring read engine (see read_engine.h): a batch's reads are queued together and submitted with
// one system call; completions are reaped as they come. Short reads are resubmitted for the rest.
#include <liburing.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "data/read_engine.h"
#include "loom/error.h"

namespace loom::data {
namespace {

class UringEngine final : public ReadEngine {
 public:
  UringEngine(const ShardReader& ds, int depth) : ds_(ds), depth_(depth < 1 ? 1 : depth) {
    const int rc = io_uring_queue_init(static_cast<unsigned>(depth_), &ring_, 0);
    if (rc < 0) {
      LOOM_THROW(NotImplementedError, "[data.read] io_uring_queue_init(", depth_,
                 ") failed: ", std::strerror(-rc),
                 " (the kernel or a sandbox forbids io_uring; use pread or mmap)");
    }
  }
  ~UringEngine() override { io_uring_queue_exit(&ring_); }

  void read(ReadOp* ops, size_t n) override {
    done_.assign(n, 0);
    pending_.clear();
    size_t next = 0, inflight = 0, finished = 0;
    while (finished < n) {
      while (next < n && inflight < static_cast<size_t>(depth_)) {
        queue(ops, next);
        ++next;
        ++inflight;
      }
      const int s = io_uring_submit_and_wait(&ring_, 1);
      if (s < 0 && s != -EINTR) throw_read_error(ds_, ops[0], ops[0].loc.offset, -s);
      io_uring_cqe* cqe = nullptr;
      unsigned head;
      unsigned seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        ++seen;
        const size_t i = static_cast<size_t>(io_uring_cqe_get_data64(cqe));
        const int res = cqe->res;
        ReadOp& op = ops[i];
        if (res == -EINTR || res == -EAGAIN) {
          pending_.push_back(i);
          continue;
        }
        if (res <= 0) {
          io_uring_cq_advance(&ring_, seen);
          drain(inflight - 1 - pending_.size());
          throw_read_error(ds_, op, op.loc.offset + done_[i], res < 0 ? -res : 0);
        }
        done_[i] += static_cast<uint32_t>(res);
        if (done_[i] < op.loc.bytes) {
          pending_.push_back(i);  // short read: ask for the rest
        } else {
          op.out = op.dst;
          --inflight;
          ++finished;
        }
      }
      io_uring_cq_advance(&ring_, seen);
      for (size_t i : pending_) queue(ops, i);
      pending_.clear();
    }
  }
  const char* name() const override { return "io_uring"; }

 private:
  void queue(ReadOp* ops, size_t i) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (!sqe) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    LOOM_INTERNAL_ASSERT(sqe != nullptr, "io_uring submission queue full");
    const ReadOp& op = ops[i];
    io_uring_prep_read(sqe, op.loc.fd, op.dst + done_[i], op.loc.bytes - done_[i],
                       op.loc.offset + done_[i]);
    io_uring_sqe_set_data64(sqe, i);
  }
  // After an error: wait for the reads still in flight so none writes into a buffer we give back.
  void drain(size_t inflight) {
    while (inflight > 0) {
      io_uring_cqe* cqe = nullptr;
      if (io_uring_wait_cqe(&ring_, &cqe) < 0) break;
      io_uring_cqe_seen(&ring_, cqe);
      --inflight;
    }
  }

  const ShardReader& ds_;
  int depth_;
  io_uring ring_{};
  std::vector<uint32_t> done_;
  std::vector<size_t> pending_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_uring_engine(const ShardReader& ds, int depth) {
  return std::make_unique<UringEngine>(ds, depth);
}

bool uring_probe() {
  io_uring ring{};
  if (io_uring_queue_init(2, &ring, 0) < 0) return false;
  io_uring_queue_exit(&ring);
  return true;
}

}  // namespace loom::data
