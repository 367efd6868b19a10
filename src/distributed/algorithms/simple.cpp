// The simple collectives: linear gather and scatter through the root, pairwise alltoallv and a
// dissemination barrier. Empty blocks are not sent (both sides know their sizes).
#include <cstring>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

void check_root(const Comm& c, int root, const char* what) {
  LOOM_CHECK(root >= 0 && root < c.size(), "[dist] ", what, " root ", root,
             " is not a rank of a group of ", c.size());
}

void check_sizes(const Comm& c, const std::vector<size_t>& v, const char* what, const char* name) {
  LOOM_CHECK(v.size() == static_cast<size_t>(c.size()), "[dist] ", what, " expected ", c.size(),
             " ", name, " but got ", v.size());
}

// Copies a block within this rank; in == out (already in place) is fine.
void copy_local(void* out, const void* in, size_t bytes) {
  if (bytes > 0 && out != in) std::memmove(out, in, bytes);
}

}  // namespace

void gather_linear(Comm& c, const void* in, void* out, const std::vector<size_t>& bytes, int root) {
  check_root(c, root, "gather");
  check_sizes(c, bytes, "gather", "block sizes");
  const int rank = c.rank();
  if (rank != root) {
    if (bytes[rank] > 0) c.wait(c.isend(root, in, bytes[rank]));
    return;
  }
  char* o = static_cast<char*>(out);
  size_t off = 0;
  for (int r = 0; r < c.size(); ++r) {
    if (r == root) {
      copy_local(o + off, in, bytes[r]);
    } else if (bytes[r] > 0) {
      c.irecv(r, o + off, bytes[r]);
    }
    off += bytes[r];
  }
  c.wait_all();
}

void scatter_linear(Comm& c, const void* in, void* out, const std::vector<size_t>& bytes,
                    int root) {
  check_root(c, root, "scatter");
  check_sizes(c, bytes, "scatter", "block sizes");
  const int rank = c.rank();
  if (rank != root) {
    if (bytes[rank] > 0) c.wait(c.irecv(root, out, bytes[rank]));
    return;
  }
  const char* i = static_cast<const char*>(in);
  size_t off = 0;
  for (int r = 0; r < c.size(); ++r) {
    if (r == root) {
      copy_local(out, i + off, bytes[r]);
    } else if (bytes[r] > 0) {
      c.isend(r, i + off, bytes[r]);
    }
    off += bytes[r];
  }
  c.wait_all();
}

void alltoallv_pairwise(Comm& c, const void* in, const std::vector<size_t>& send_bytes,
                        const std::vector<size_t>& send_off, void* out,
                        const std::vector<size_t>& recv_bytes,
                        const std::vector<size_t>& recv_off) {
  check_sizes(c, send_bytes, "alltoallv", "send sizes");
  check_sizes(c, send_off, "alltoallv", "send offsets");
  check_sizes(c, recv_bytes, "alltoallv", "receive sizes");
  check_sizes(c, recv_off, "alltoallv", "receive offsets");
  const int size = c.size(), rank = c.rank();
  LOOM_CHECK(send_bytes[rank] == recv_bytes[rank], "[dist] alltoallv on rank ", rank, " sends ",
             send_bytes[rank], " bytes to itself but expects ", recv_bytes[rank]);
  const char* i = static_cast<const char*>(in);
  char* o = static_cast<char*>(out);
  // Step s pairs us with rank+s (send) and rank-s (receive); all receives are posted first.
  for (int s = 1; s < size; ++s) {
    int from = (rank - s + size) % size;
    if (recv_bytes[from] > 0) c.irecv(from, o + recv_off[from], recv_bytes[from]);
  }
  for (int s = 1; s < size; ++s) {
    int to = (rank + s) % size;
    if (send_bytes[to] > 0) c.isend(to, i + send_off[to], send_bytes[to]);
  }
  copy_local(o + recv_off[rank], i + send_off[rank], send_bytes[rank]);
  c.wait_all();
}

void barrier_dissemination(Comm& c) {
  // Round k: tell rank+2^k we arrived, hear from rank-2^k. After ceil(log2(size)) rounds everyone
  // has heard, directly or through others, from every rank.
  const int size = c.size(), rank = c.rank();
  char token_out = 1, token_in = 0;
  for (int d = 1; d < size; d *= 2) {
    Request* r = c.irecv((rank - d + size) % size, &token_in, 1);
    Request* s = c.isend((rank + d) % size, &token_out, 1);
    c.wait(r);
    c.wait(s);
  }
}

}  // namespace loom::dist
