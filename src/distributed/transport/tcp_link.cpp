// TCP link: one or more non-blocking connections (channels) to a peer.
//
// Wire format, per channel: for every message part, an 8-byte little-endian header holding the
// message's total size, then the part's bytes. Messages below kSplitMin bytes travel whole on
// channel 0; larger ones are cut into one contiguous slice per channel. Both sides slice the same
// way because sizes must match; the header lets the receiver detect a mismatch instead of
// misreading.
//
// Sends write straight from the caller's memory (sendmsg with an iovec of header + data). Receives
// read straight into the destination when it is posted; data that arrives for a receive not yet
// posted is left in the kernel until the link has stalled for a while, then read into a side buffer
// (so two ranks that both send before receiving cannot deadlock).
#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <deque>

#include "distributed/transport/transport.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

constexpr size_t kSplitMin = 256u << 10;
constexpr int kStallBeforeBuffering = 64;
constexpr size_t kEof = SIZE_MAX;

struct Part {
  Request* r;
  size_t off;
  size_t len;
  size_t moved = 0;  // of header (8) + len
};

struct Unexpected {
  uint64_t total;
  std::vector<char> data;
};

struct Channel {
  int fd = -1;
  int index = 0;
  std::deque<Part> sends;
  std::deque<Part> recvs;
  // An incoming part being read into a side buffer.
  bool reading_unexpected = false;
  uint64_t hdr = 0;
  size_t hdr_got = 0;
  Unexpected cur;
  size_t cur_got = 0;
  std::deque<Unexpected> unexpected;
  bool eof = false;  // the peer closed this connection after its last message
};

class TcpLink final : public Link {
 public:
  TcpLink(int rank, TcpPeer peer) : rank_(rank), peer_(peer.peer) {
    for (size_t i = 0; i < peer.fds.size(); ++i) {
      Channel c;
      c.fd = peer.fds[i];
      c.index = static_cast<int>(i);
      channels_.push_back(std::move(c));
    }
  }
  ~TcpLink() override { close(); }

  const char* kind() const override { return "tcp"; }

  bool has_pending() const override { return pending_ > 0; }

  void post(Request* r) override {
    LOOM_CHECK_AS(DistError, !closed_, "connection to rank ", peer_, " is closed");
    size_t n = r->bytes;
    size_t nch = n < kSplitMin ? 1 : channels_.size();
    r->parts = static_cast<uint32_t>(nch);
    ++pending_;
    for (size_t c = 0; c < nch; ++c) {
      size_t lo = n * c / nch, hi = n * (c + 1) / nch;
      Part p{r, lo, hi - lo};
      if (r->kind == Request::Send) {
        channels_[c].sends.push_back(p);
      } else {
        channels_[c].recvs.push_back(p);
        match_unexpected(channels_[c]);
      }
    }
  }

  bool progress() override {
    bool moved = false;
    for (Channel& c : channels_) {
      moved |= progress_sends(c);
      moved |= progress_recvs(c);
    }
    stall_ = moved ? 0 : stall_ + 1;
    return moved;
  }

  bool add_poll_fds(std::vector<pollfd>& out) const override {
    for (const Channel& c : channels_) {
      short ev = c.eof ? 0 : POLLIN;
      if (!c.sends.empty()) ev |= POLLOUT;
      out.push_back(pollfd{c.fd, ev, 0});
    }
    return true;
  }

  void close() override {
    if (closed_) return;
    closed_ = true;
    for (Channel& c : channels_) {
      if (c.fd >= 0) {
        ::shutdown(c.fd, SHUT_RDWR);
        ::close(c.fd);
        c.fd = -1;
      }
    }
  }

 private:
  void finish_part(Part& p) {
    if (--p.r->parts == 0) {
      p.r->complete = true;
      --pending_;
    }
  }

  [[noreturn]] void broken(const Channel& c, const char* what, int err) {
    std::string why = err == 0
                          ? std::string("the peer closed the connection (it exited or aborted)")
                          : std::string(std::strerror(err));
    LOOM_THROW(DistError, "tcp channel ", c.index, " to rank ", peer_, ": ", what, ": ", why);
  }

  bool progress_sends(Channel& c) {
    bool moved = false;
    while (!c.sends.empty()) {
      Part& p = c.sends.front();
      uint64_t hdr = p.r->bytes;
      iovec iov[2];
      int n = 0;
      if (p.moved < 8) {
        iov[n++] = iovec{reinterpret_cast<char*>(&hdr) + p.moved, 8 - p.moved};
        if (p.len) iov[n++] = iovec{p.r->data + p.off, p.len};
      } else {
        iov[n++] = iovec{p.r->data + p.off + (p.moved - 8), p.len - (p.moved - 8)};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<size_t>(n);
      ssize_t w = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        broken(c, "send failed", errno);
      }
      moved = true;
      p.moved += static_cast<size_t>(w);
      if (p.moved == p.len + 8) {
        finish_part(p);
        c.sends.pop_front();
      }
    }
    return moved;
  }

  // Reads into the iovecs; returns bytes read, 0 when nothing is there yet, kEof when the peer has
  // closed the connection.
  size_t read_some(Channel& c, iovec* iov, int n) {
    for (;;) {
      ssize_t r = ::readv(c.fd, iov, n);
      if (r > 0) return static_cast<size_t>(r);
      if (r == 0) return kEof;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
      if (errno == EINTR) continue;
      broken(c, "receive failed", errno);
    }
  }

  void check_size(const Channel&, const Part& p, uint64_t total) const {
    LOOM_CHECK_AS(DistError, total == p.r->bytes, "rank ", peer_, " sent a message of ", total,
                  " bytes but rank ", rank_, " expected ", p.r->bytes,
                  " (the ranks called different collectives or sizes)");
  }

  void match_unexpected(Channel& c) {
    while (!c.recvs.empty() && !c.unexpected.empty()) {
      Part& p = c.recvs.front();
      Unexpected& u = c.unexpected.front();
      check_size(c, p, u.total);
      if (p.len) std::memcpy(p.r->data + p.off, u.data.data(), p.len);
      finish_part(p);
      c.recvs.pop_front();
      c.unexpected.pop_front();
    }
  }

  bool progress_recvs(Channel& c) {
    bool moved = false;
    for (;;) {
      if (c.reading_unexpected || (c.recvs.empty() && stall_ >= kStallBeforeBuffering)) {
        // Side buffer: header first, then the part.
        if (!c.reading_unexpected) {
          c.reading_unexpected = true;
          c.hdr_got = 0;
          c.cur_got = 0;
        }
        if (c.hdr_got < 8) {
          if (c.eof) return moved;
          iovec iov{reinterpret_cast<char*>(&c.hdr) + c.hdr_got, 8 - c.hdr_got};
          size_t r = read_some(c, &iov, 1);
          if (r == kEof && c.hdr_got == 0 && c.recvs.empty()) {
            // The peer finished and closed; an error only if we still expect something from it.
            c.eof = true;
            c.reading_unexpected = false;
            return moved;
          }
          if (r == kEof) broken(c, "receive failed", 0);
          if (r == 0) {
            if (c.hdr_got == 0) c.reading_unexpected = false;
            return moved;
          }
          moved = true;
          c.hdr_got += r;
          if (c.hdr_got < 8) return moved;
          c.cur.total = c.hdr;
          c.cur.data.assign(slice(c.hdr, c.index), 0);
        }
        if (c.cur_got < c.cur.data.size()) {
          iovec iov{c.cur.data.data() + c.cur_got, c.cur.data.size() - c.cur_got};
          size_t r = read_some(c, &iov, 1);
          if (r == kEof) broken(c, "receive failed", 0);
          if (r == 0) return moved;
          moved = true;
          c.cur_got += r;
          if (c.cur_got < c.cur.data.size()) return moved;
        }
        c.reading_unexpected = false;
        c.unexpected.push_back(std::move(c.cur));
        c.cur = Unexpected{};
        match_unexpected(c);
        continue;
      }
      if (c.recvs.empty()) return moved;
      Part& p = c.recvs.front();
      iovec iov[2];
      int n = 0;
      if (p.moved < 8) {
        iov[n++] = iovec{reinterpret_cast<char*>(&c.hdr) + p.moved, 8 - p.moved};
        if (p.len) iov[n++] = iovec{p.r->data + p.off, p.len};
      } else {
        iov[n++] = iovec{p.r->data + p.off + (p.moved - 8), p.len - (p.moved - 8)};
      }
      size_t r = c.eof ? kEof : read_some(c, iov, n);
      if (r == kEof) broken(c, "receive failed", 0);
      if (r == 0) return moved;
      moved = true;
      bool had_header = p.moved >= 8;
      p.moved += r;
      if (!had_header && p.moved >= 8) check_size(c, p, c.hdr);
      if (p.moved == p.len + 8) {
        finish_part(p);
        c.recvs.pop_front();
      }
    }
  }

  size_t slice(uint64_t total, int channel) const {
    size_t nch = total < kSplitMin ? 1 : channels_.size();
    if (static_cast<size_t>(channel) >= nch) return 0;
    return total * (channel + 1) / nch - total * channel / nch;
  }

  int rank_;
  int peer_;
  std::vector<Channel> channels_;
  int pending_ = 0;
  int stall_ = 0;
  bool closed_ = false;
};

}  // namespace

std::unique_ptr<Link> make_tcp_link(int rank, TcpPeer peer) {
  return std::make_unique<TcpLink>(rank, std::move(peer));
}

}  // namespace loom::dist
