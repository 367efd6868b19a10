// Shared-memory link between two ranks on one host.
//
// Every rank owns an inbox segment with one single-producer single-consumer byte ring per peer; a
// peer writes messages into its ring of our inbox, we read them. A message is an 8-byte header
// (size, top bit = "by address") and either the bytes themselves, padded to 8, streamed through the
// ring as space frees, or, for large messages when the kernel allows it, the sender's address: the
// receiver copies straight from the sender's memory with process_vm_readv (one copy instead of two)
// and bumps an acknowledgement counter that completes the send. A sender with nothing else to do
// helps with that copy, writing pieces straight into the receiver's memory (Note [Cooperative
// copies]).
//
// Liveness: a stalled link checks every so often that the peer's process still exists and that it
// has not closed its side; either failure is a DistError naming the peer.
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "distributed/transport/transport.h"
#include "loom/error.h"

namespace loom::dist {

namespace {

constexpr uint32_t kMagic = 0x6c6f6f6d;  // "loom"
constexpr uint32_t kVersion = 3;  // 2: the inbox header holds the owner's doorbell; 3: coop copies
constexpr uint64_t kByAddress = 1ull << 63;
constexpr int kStallBeforeBuffering = 64;
constexpr int kStallBetweenLivenessChecks = 4096;
constexpr int kTicketBits = 24;
constexpr uint64_t kOffsetMask = (uint64_t{1} << (64 - kTicketBits)) - 1;

// Note [Cooperative copies]
// A message sent by address is copied by its receiver, one process_vm_readv at a time, while the
// sender waits for the acknowledgement, often with nothing else to do: a broadcast root, a rank
// that finished its own receives first. So the receiver publishes its destination and claims the
// message's pieces (kCoopPiece bytes) from a shared counter; a sender that is idle in wait() claims
// pieces from the same counter (help()) and writes them into the receiver's memory with
// process_vm_writev. Whoever runs copies; on two ranks a broadcast moves up to twice as fast, and
// four ranks on two cores share the copying instead of leaving it to the receivers.
// The claim word holds the message's ticket beside the offset, and a sender claims with a
// compare-and-swap that checks it, so a sender still looking at an earlier message can never take a
// piece of the next one. The receiver acknowledges only when `copied` reaches the length: the
// sender's buffer stays untouched by either side after that, and the sender's pieces are in place.
// Receivers copy alone below kCoopMinBytes, when the sender cannot write into the receiver
// (ptrace rules), or with LOOM_SHM_NO_COOP.
constexpr uint64_t kCoopPiece = 256u << 10;
constexpr uint64_t kCoopMinBytes = 2 * kCoopPiece;

struct alignas(64) Ring {
  std::atomic<uint64_t> head;  // written by the producer
  char pad0[56];
  std::atomic<uint64_t> tail;  // written by the consumer
  char pad1[56];
  std::atomic<uint64_t> acks;  // by-address messages the consumer has copied
  char pad2[56];
  std::atomic<int32_t> producer_pid;
  std::atomic<int32_t> consumer_pid;
  std::atomic<uint32_t> producer_closed;
  std::atomic<uint32_t> consumer_closed;
  std::atomic<uint32_t> consumer_can_read_producer;  // process_vm_readv works consumer <- producer
  char pad3[44];
  // The by-address message being copied (Note [Cooperative copies]): `claim` packs the message's
  // ticket (top kTicketBits) and the next offset to copy; `copied` counts bytes either side copied.
  std::atomic<uint64_t> claim;
  std::atomic<uint64_t> copied;
  std::atomic<uint64_t> dst;  // the consumer's destination address (the length is the message's)
  char pad4[40];
};
static_assert(sizeof(Ring) == 320);

struct SegHeader {
  uint32_t magic;
  uint32_t version;
  int32_t slots;
  int32_t owner_pid;
  uint64_t ring_bytes;
  Doorbell
      bell;  // rung by the peers that write into this inbox (Note [Doorbells] in communicator.h)
  char pad[32];
};
static_assert(sizeof(SegHeader) == 64);

size_t round8(size_t n) {
  return (n + 7) & ~size_t{7};
}

}  // namespace

class ShmSegment {
 public:
  ShmSegment(void* base, size_t bytes) : base_(static_cast<char*>(base)), bytes_(bytes) {}
  ~ShmSegment() { ::munmap(base_, bytes_); }
  SegHeader* header() const { return reinterpret_cast<SegHeader*>(base_); }
  Ring* ring(int slot) const {
    return reinterpret_cast<Ring*>(
        base_ + 64 + static_cast<size_t>(slot) * (sizeof(Ring) + header()->ring_bytes));
  }
  char* ring_data(int slot) const { return reinterpret_cast<char*>(ring(slot)) + sizeof(Ring); }
  uint64_t ring_bytes() const { return header()->ring_bytes; }

 private:
  char* base_;
  size_t bytes_;
};

namespace {

size_t segment_bytes(int slots, size_t ring_bytes) {
  return 64 + static_cast<size_t>(slots) * (sizeof(Ring) + ring_bytes);
}

class ShmLink final : public Link {
 public:
  ShmLink(int rank, int peer, int peer_pid, std::shared_ptr<ShmSegment> inbox,
          std::shared_ptr<ShmSegment> peer_inbox, size_t cma_min, bool coop)
      : rank_(rank),
        peer_(peer),
        peer_pid_(peer_pid),
        inbox_(std::move(inbox)),
        outbox_(std::move(peer_inbox)),
        coop_(coop) {
    in_ = inbox_->ring(peer);
    in_data_ = inbox_->ring_data(peer);
    in_cap_ = inbox_->ring_bytes();
    out_ = outbox_->ring(rank);
    out_data_ = outbox_->ring_data(rank);
    out_cap_ = outbox_->ring_bytes();
    // By address only when the peer (our consumer) said it can read our memory.
    cma_min_ = out_->consumer_can_read_producer.load() ? cma_min : SIZE_MAX;
  }
  ~ShmLink() override { close(); }

  const char* kind() const override { return "shm"; }
  bool has_pending() const override { return !sends_.empty() || !recvs_.empty(); }
  // Every move is published in a ring: message bytes (head), space freed (tail), a by-address read
  // done (acks). The peer may sleep waiting for any of them, so each progress() that moved rings
  // it.
  Doorbell* doorbell() const override { return &inbox_->header()->bell; }
  // A peer that wrote its last messages and then exited (its part of a final barrier done) has
  // closed the link, but what it left in the ring is still ours: take it before calling the peer
  // lost, so that a waiter that slept through the last doorbell does not fail a call that can end.
  void check_alive() override {
    if (!closed_) {
      progress_recvs();
      progress_sends();
    }
    if (has_pending()) check_peer();
  }
  uint64_t bytes_helped() const override { return helped_; }

  // Copies pieces of the oldest send the peer is reading by address (Note [Cooperative copies]).
  bool help() override {
    if (!coop_ || closed_ || sends_.empty()) return false;
    Request* r = sends_.front();
    if (r->parts != 2) return false;
    const uint64_t ticket = r->done & ((uint64_t{1} << kTicketBits) - 1);
    bool moved = false;
    for (;;) {
      uint64_t cur = out_->claim.load(std::memory_order_acquire);
      if ((cur >> (64 - kTicketBits)) != ticket) return moved;
      const uint64_t off = cur & kOffsetMask;
      if (off >= r->bytes) return moved;
      if (!out_->claim.compare_exchange_weak(cur, cur + kCoopPiece, std::memory_order_acq_rel))
        continue;
      // The piece is ours, so the receiver waits for it: dst is this message's.
      const uint64_t dst = out_->dst.load(std::memory_order_relaxed);
      const size_t n = std::min<uint64_t>(kCoopPiece, r->bytes - off);
      write_remote(dst + off, r->data + off, n);
      out_->copied.fetch_add(n, std::memory_order_release);
      outbox_->header()->bell.notify();  // the receiver may sleep waiting for this piece
      helped_ += n;
      moved = true;
    }
  }

  void post(Request* r) override {
    LOOM_CHECK_AS(DistError, !closed_, "shared-memory link to rank ", peer_, " is closed");
    if (r->kind == Request::Send) {
      sends_.push_back(r);
    } else {
      recvs_.push_back(r);
      match_unexpected();
    }
  }

  bool progress() override {
    bool moved = progress_sends();
    moved |= progress_recvs();
    if (moved) {
      stall_ = 0;
      outbox_->header()->bell.notify();
    } else if (++stall_ % kStallBetweenLivenessChecks == 0) {
      check_peer();
    }
    return moved;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    out_->producer_closed.store(1);
    in_->consumer_closed.store(1);
    outbox_->header()->bell.notify();
  }

 private:
  void check_peer() {
    LOOM_CHECK_AS(DistError, !(in_->producer_closed.load() || out_->consumer_closed.load()),
                  "rank ", peer_, " closed its shared-memory link (it aborted)");
    LOOM_CHECK_AS(DistError, !(::kill(peer_pid_, 0) != 0 && errno == ESRCH), "rank ", peer_,
                  " (pid ", peer_pid_, ") has exited");
  }

  // ---- producer side ----
  bool progress_sends() {
    bool moved = false;
    while (!sends_.empty()) {
      Request* r = sends_.front();
      uint64_t head = out_->head.load(std::memory_order_relaxed);
      if (r->parts == 0) {  // header not written yet
        bool by_addr = r->bytes >= cma_min_;
        size_t need = by_addr ? 16 : 8;
        if (out_cap_ - (head - out_tail_) < need) {
          out_tail_ = out_->tail.load(std::memory_order_acquire);
          if (out_cap_ - (head - out_tail_) < need) return moved;
        }
        uint64_t h = r->bytes | (by_addr ? kByAddress : 0);
        std::memcpy(out_data_ + (head & (out_cap_ - 1)), &h, 8);
        head += 8;
        if (by_addr) {
          uint64_t a = reinterpret_cast<uint64_t>(r->data);
          std::memcpy(out_data_ + (head & (out_cap_ - 1)), &a, 8);
          head += 8;
          r->parts = 2;
          r->done = ++acks_expected_;  // the ticket the consumer's acknowledgement must reach
        } else {
          r->parts = 1;
          head = stream_out(r, head);
        }
        out_->head.store(head, std::memory_order_release);
        moved = true;
      } else if (r->parts == 1) {
        uint64_t h2 = stream_out(r, head);
        if (h2 != head) {
          out_->head.store(h2, std::memory_order_release);
          moved = true;
        }
      }
      if (r->parts == 2) {
        if (out_->acks.load(std::memory_order_acquire) < r->done) return moved;
      } else if (r->done < round8(r->bytes)) {
        return moved;
      }
      r->complete = true;
      sends_.pop_front();
      moved = true;
    }
    return moved;
  }

  // Copies as much of r's payload (padded to 8) as fits; returns the new head.
  uint64_t stream_out(Request* r, uint64_t head) {
    size_t total = round8(r->bytes);
    size_t room = out_cap_ - (head - out_tail_);
    if (room < total - r->done) {
      out_tail_ = out_->tail.load(std::memory_order_acquire);
      room = out_cap_ - (head - out_tail_);
    }
    size_t n = std::min(room, total - r->done);
    size_t copied = 0;
    while (copied < n) {
      size_t pos = head & (out_cap_ - 1);
      size_t chunk = std::min(n - copied, out_cap_ - pos);
      size_t src_off = r->done + copied;
      size_t real = src_off < r->bytes ? std::min(chunk, r->bytes - src_off) : 0;
      if (real) std::memcpy(out_data_ + pos, r->data + src_off, real);
      copied += chunk;
      head += chunk;
    }
    r->done += n;
    return head;
  }

  // ---- consumer side ----
  // A message kept until its receive is posted. Not zero-filled, and recycled (spare_): a sender
  // running ahead of its receiver makes many of these, and fresh zeroed memory cost a 32 KiB
  // broadcast page faults and a memset each (14 us instead of 3.5 per call).
  struct Held {
    std::unique_ptr<char[]> data;
    size_t size = 0;
    size_t cap = 0;
  };
  static constexpr size_t kMaxSpare = 8;

  Held take_buffer(size_t n) {
    for (size_t i = 0; i < spare_.size(); ++i) {
      if (spare_[i].cap >= n) {
        Held h = std::move(spare_[i]);
        spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
        h.size = n;
        return h;
      }
    }
    return Held{std::make_unique_for_overwrite<char[]>(std::max<size_t>(n, 1)), n,
                std::max<size_t>(n, 1)};
  }

  void give_back(Held h) {
    if (spare_.size() < kMaxSpare) spare_.push_back(std::move(h));
  }

  struct Incoming {
    bool active = false;
    bool by_addr = false;
    uint64_t total = 0;
    uint64_t addr = 0;
    size_t got = 0;       // payload bytes consumed, padding included
    bool shared = false;  // a shared copy was published (Note [Cooperative copies])
    Request* req = nullptr;
    Held buf;  // holds the message when no receive was posted for it
  };

  void check_size(Request* r, uint64_t total) const {
    LOOM_CHECK_AS(DistError, total == r->bytes, "rank ", peer_, " sent a message of ", total,
                  " bytes but rank ", rank_, " expected ", r->bytes,
                  " (the ranks called different collectives or sizes)");
  }

  void match_unexpected() {
    while (!recvs_.empty() && !unexpected_.empty()) {
      Request* r = recvs_.front();
      check_size(r, unexpected_.front().size);
      if (r->bytes) std::memcpy(r->data, unexpected_.front().data.get(), r->bytes);
      give_back(std::move(unexpected_.front()));
      r->complete = true;
      recvs_.pop_front();
      unexpected_.pop_front();
    }
  }

  bool progress_recvs() {
    bool moved = false;
    for (;;) {
      if (!in_msg_.active) {
        if (recvs_.empty() && stall_ < kStallBeforeBuffering) return moved;
        uint64_t head = in_->head.load(std::memory_order_acquire);
        if (head - in_tail_ < 8) return moved;
        uint64_t h;
        std::memcpy(&h, in_data_ + (in_tail_ & (in_cap_ - 1)), 8);
        in_msg_ = Incoming{};
        in_msg_.active = true;
        in_msg_.by_addr = (h & kByAddress) != 0;
        in_msg_.total = h & ~kByAddress;
        in_tail_ += 8;
        if (in_msg_.by_addr) {
          std::memcpy(&in_msg_.addr, in_data_ + (in_tail_ & (in_cap_ - 1)), 8);
          in_tail_ += 8;
        }
        in_->tail.store(in_tail_, std::memory_order_release);
        if (!recvs_.empty()) {
          in_msg_.req = recvs_.front();
          check_size(in_msg_.req, in_msg_.total);
        } else {
          in_msg_.buf = take_buffer(in_msg_.total);
        }
        moved = true;
      }
      char* dst = in_msg_.req ? in_msg_.req->data : in_msg_.buf.data.get();
      if (in_msg_.by_addr) {
        if (in_msg_.total >= kCoopMinBytes) {
          if (!read_shared(dst, moved)) return moved;  // the sender is still writing a piece
        } else {
          read_remote(dst, in_msg_.addr, 0, in_msg_.total);
        }
        in_->acks.fetch_add(1, std::memory_order_release);
      } else {
        size_t total = round8(in_msg_.total);
        uint64_t head = in_->head.load(std::memory_order_acquire);
        size_t avail = std::min<size_t>(head - in_tail_, total - in_msg_.got);
        if (avail == 0 && in_msg_.got < total) return moved;
        size_t copied = 0;
        while (copied < avail) {
          size_t pos = in_tail_ & (in_cap_ - 1);
          size_t chunk = std::min(avail - copied, in_cap_ - pos);
          size_t off = in_msg_.got + copied;
          size_t real = off < in_msg_.total ? std::min<size_t>(chunk, in_msg_.total - off) : 0;
          if (real) std::memcpy(dst + off, in_data_ + pos, real);
          copied += chunk;
          in_tail_ += chunk;
        }
        in_msg_.got += avail;
        in_->tail.store(in_tail_, std::memory_order_release);
        moved = moved || avail > 0;
        if (in_msg_.got < total) return moved;
      }
      moved = true;
      if (in_msg_.req) {
        in_msg_.req->complete = true;
        recvs_.pop_front();
        // The link was busy: a next message already here waits for its receive
        // (kStallBeforeBuffering counts from now), rather than being copied aside at once because
        // of waits before this one.
        stall_ = 0;
      } else {
        unexpected_.push_back(std::move(in_msg_.buf));
      }
      in_msg_ = Incoming{};
      match_unexpected();
    }
  }

  // Copies bytes [begin, end) of the peer's message at `addr` into dst + begin.
  void read_remote(char* dst, uint64_t addr, size_t begin, size_t end) {
    size_t off = begin;
    while (off < end) {
      iovec local{dst + off, end - off};
      iovec remote{reinterpret_cast<void*>(addr + off), end - off};
      ssize_t r = ::process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        LOOM_THROW(DistError, "reading ", end - begin, " bytes from rank ", peer_, " (pid ",
                   peer_pid_, ") failed: ", r == 0 ? "no data" : std::strerror(errno));
      }
      off += static_cast<size_t>(r);
    }
  }

  // Writes n bytes from src into the peer's memory at addr (the sender's half of a shared copy).
  void write_remote(uint64_t addr, const char* src, size_t n) {
    size_t off = 0;
    while (off < n) {
      iovec local{const_cast<char*>(src) + off, n - off};
      iovec remote{reinterpret_cast<void*>(addr + off), n - off};
      ssize_t r = ::process_vm_writev(peer_pid_, &local, 1, &remote, 1, 0);
      if (r <= 0) {
        if (r < 0 && errno == EINTR) continue;
        LOOM_THROW(DistError, "writing ", n, " bytes into rank ", peer_, " (pid ", peer_pid_,
                   ") failed: ", r == 0 ? "no data" : std::strerror(errno));
      }
      off += static_cast<size_t>(r);
    }
  }

  // The receiver's side of a shared copy (Note [Cooperative copies]): publish, claim pieces until
  // none is left; true once the sender's pieces are in place too. Until then progress() returns and
  // Comm::wait() checks the deadline (a sender stopped in the middle of a piece must not hang us).
  bool read_shared(char* dst, bool& moved) {
    const uint64_t total = in_msg_.total;
    if (!in_msg_.shared) {
      in_msg_.shared = true;
      const uint64_t ticket =
          (in_->acks.load(std::memory_order_relaxed) + 1) & ((uint64_t{1} << kTicketBits) - 1);
      in_->dst.store(reinterpret_cast<uint64_t>(dst), std::memory_order_relaxed);
      in_->copied.store(0, std::memory_order_relaxed);
      in_->claim.store(ticket << (64 - kTicketBits), std::memory_order_release);
      outbox_->header()->bell.notify();  // a sleeping sender may come and help
      uint64_t mine = 0;
      for (;;) {
        const uint64_t off =
            in_->claim.fetch_add(kCoopPiece, std::memory_order_acq_rel) & kOffsetMask;
        if (off >= total) break;
        const uint64_t end = std::min(total, off + kCoopPiece);
        read_remote(dst, in_msg_.addr, off, end);
        mine += end - off;
      }
      moved = true;
      if (in_->copied.fetch_add(mine, std::memory_order_acq_rel) + mine == total) return true;
    }
    return in_->copied.load(std::memory_order_acquire) >= total;
  }

  int rank_;
  int peer_;
  int peer_pid_;
  std::shared_ptr<ShmSegment> inbox_;
  std::shared_ptr<ShmSegment> outbox_;
  Ring* in_;
  char* in_data_;
  uint64_t in_cap_;
  uint64_t in_tail_ = 0;
  Ring* out_;
  char* out_data_;
  uint64_t out_cap_;
  uint64_t out_tail_ = 0;  // cached consumer position
  uint64_t acks_expected_ = 0;
  size_t cma_min_;
  bool coop_;            // this rank may write into the peer's memory (Note [Cooperative copies])
  uint64_t helped_ = 0;  // bytes this rank wrote into the peer's receives
  std::deque<Request*> sends_;
  std::deque<Request*> recvs_;
  Incoming in_msg_;
  std::deque<Held> unexpected_;
  std::vector<Held> spare_;
  int stall_ = 0;
  bool closed_ = false;
};

// Read by peers to test process_vm_readv at setup.
volatile uint64_t g_cma_probe = 0x5eed1e55c0ffee11ull;

}  // namespace

std::shared_ptr<ShmSegment> shm_create_inbox(const std::string& name, int size, size_t ring_bytes) {
  LOOM_INTERNAL_ASSERT((ring_bytes & (ring_bytes - 1)) == 0 && ring_bytes >= 4096, "ring size");
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  LOOM_CHECK_AS(DistError, fd >= 0, "[dist] cannot create shared-memory segment ", name, ": ",
                std::strerror(errno));
  size_t bytes = segment_bytes(size, ring_bytes);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    int e = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    LOOM_THROW(DistError, "[dist] cannot size shared-memory segment ", name, " to ", bytes,
               " bytes: ", std::strerror(e), " (is /dev/shm full?)");
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (p == MAP_FAILED) {
    ::shm_unlink(name.c_str());
    LOOM_THROW(DistError, "[dist] cannot map ", name, ": ", std::strerror(errno));
  }
  auto seg = std::make_shared<ShmSegment>(p, bytes);
  SegHeader* h = seg->header();
  h->slots = size;
  h->owner_pid = static_cast<int32_t>(::getpid());
  h->ring_bytes = ring_bytes;
  h->version = kVersion;
  for (int i = 0; i < size; ++i) {
    Ring* r = seg->ring(i);
    new (r) Ring{};
    r->consumer_pid.store(static_cast<int32_t>(::getpid()));
  }
  std::atomic_thread_fence(std::memory_order_release);
  reinterpret_cast<std::atomic<uint32_t>*>(&h->magic)->store(kMagic, std::memory_order_release);
  // Let peers read this process's memory (Yama ptrace_scope 1 otherwise allows only ancestors).
  ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  return seg;
}

std::shared_ptr<ShmSegment> shm_open_inbox(const std::string& name) {
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  LOOM_CHECK_AS(DistError, fd >= 0, "[dist] cannot open shared-memory segment ", name, ": ",
                std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < sizeof(SegHeader)) {
    ::close(fd);
    LOOM_THROW(DistError, "[dist] shared-memory segment ", name, " is truncated");
  }
  size_t bytes = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  LOOM_CHECK_AS(DistError, p != MAP_FAILED, "[dist] cannot map ", name, ": ", std::strerror(errno));
  auto seg = std::make_shared<ShmSegment>(p, bytes);
  SegHeader* h = seg->header();
  LOOM_CHECK_AS(
      DistError,
      !(reinterpret_cast<std::atomic<uint32_t>*>(&h->magic)->load(std::memory_order_acquire) !=
            kMagic ||
        h->version != kVersion || segment_bytes(h->slots, h->ring_bytes) != bytes),
      "[dist] shared-memory segment ", name, " has an unexpected layout (another loom version?)");
  return seg;
}

void shm_unlink(const std::string& name) {
  ::shm_unlink(name.c_str());
}

uint64_t cma_probe_address() {
  return reinterpret_cast<uint64_t>(&g_cma_probe);
}

bool cma_probe(int pid, uint64_t addr) {
  uint64_t v = 0;
  iovec local{&v, 8};
  iovec remote{reinterpret_cast<void*>(addr), 8};
  return ::process_vm_readv(pid, &local, 1, &remote, 1, 0) == 8 && v == g_cma_probe;
}

bool cma_write_probe(int pid, uint64_t addr) {
  uint64_t v = g_cma_probe;  // the value already there: readers of it see no change
  iovec local{&v, 8};
  iovec remote{reinterpret_cast<void*>(addr), 8};
  return ::process_vm_writev(pid, &local, 1, &remote, 1, 0) == 8;
}

void shm_mark_cma(ShmSegment& inbox, int peer, bool ok) {
  inbox.ring(peer)->consumer_can_read_producer.store(ok ? 1 : 0);
  inbox.ring(peer)->producer_pid.store(0);
}

std::unique_ptr<Link> make_shm_link(int rank, int peer, int peer_pid,
                                    std::shared_ptr<ShmSegment> inbox,
                                    std::shared_ptr<ShmSegment> peer_inbox, size_t cma_min_bytes,
                                    bool coop_writes) {
  return std::make_unique<ShmLink>(rank, peer, peer_pid, std::move(inbox), std::move(peer_inbox),
                                   cma_min_bytes, coop_writes);
}

}  // namespace loom::dist
