// The other collective algorithms on in-process groups of 1..8 ranks: binomial broadcast and reduce
// from every root, ring allgather and reduce-scatter with uneven blocks (zeros included), linear
// gather and scatter, pairwise alltoallv with random splits, and the dissemination barrier.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/local_ranks.h"
#include "distributed/reduce_reference.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::check_reduced;
using loom::testing::ChunkBytes;
using loom::testing::make_input;
using loom::testing::mix_bits;
using loom::testing::run_ranks;

// Byte i of the block that rank `from` contributes (to rank `to`, for alltoallv).
char pattern(int from, int to, size_t i) {
  return static_cast<char>(mix_bits(from * 31 + to, i));
}

std::vector<size_t> offsets(const std::vector<size_t>& sizes) {
  std::vector<size_t> off(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) off[i] = off[i - 1] + sizes[i - 1];
  return off;
}

// Uneven block sizes with zeros, some larger than a pipeline piece.
std::vector<size_t> uneven(int size, size_t scale) {
  std::vector<size_t> v(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) v[r] = (r % 3 == 1) ? 0 : (static_cast<size_t>(r) * 7 + 3) * scale;
  return v;
}

TEST(Broadcast, EveryRootSizeAndLength) {
  ChunkBytes chunk(64);
  for (int size = 1; size <= 8; ++size) {
    for (int root = 0; root < size; ++root) {
      const std::vector<size_t> lengths = {0, 1, 7, 1001, 100003};
      run_ranks(size, [&](Comm& c) {
        for (size_t n : lengths) {
          std::vector<char> buf(n, 0);
          for (size_t i = 0; i < n; ++i) buf[i] = c.rank() == root ? pattern(root, 0, i) : 'x';
          c.reset();
          broadcast_binomial(c, buf.data(), n, root);
          for (size_t i = 0; i < n; ++i) {
            ASSERT_EQ(buf[i], pattern(root, 0, i))
                << "byte " << i << " of " << n << " at rank " << c.rank() << " root " << root;
          }
        }
      });
    }
  }
}

TEST(Reduce, EveryRootLeavesOthersUnchanged) {
  ChunkBytes chunk(64);
  struct Case {
    DType dt;
    ReduceOp op;
  };
  const Case cases[] = {{kFloat32, ReduceOp::Sum},
                        {kInt32, ReduceOp::Prod},
                        {kFloat64, ReduceOp::Max},
                        {kBool, ReduceOp::Min},
                        {kUInt8, ReduceOp::Sum}};
  for (int size = 1; size <= 8; ++size) {
    for (int root = 0; root < size; ++root) {
      run_ranks(size, [&](Comm& c) {
        for (const Case& cs : cases) {
          for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
            std::vector<char> buf = make_input(cs.dt, c.rank(), n, cs.op);
            const std::vector<char> before = buf;
            c.reset();
            reduce_binomial(c, buf.data(), n, cs.dt, cs.op, root);
            if (c.rank() == root) {
              ASSERT_EQ(check_reduced(cs.dt, buf.data(), size, n, cs.op), "")
                  << dtype_name(cs.dt) << " count " << n << " root " << root << " of " << size;
            } else {
              ASSERT_TRUE(buf == before) << "rank " << c.rank() << " data changed";
            }
          }
        }
      });
    }
  }
}

TEST(Allgather, UnevenBlocksWithZeros) {
  ChunkBytes chunk(64);
  for (int size = 1; size <= 8; ++size) {
    for (size_t scale : {size_t{1}, size_t{50}, size_t{3001}}) {
      const std::vector<size_t> bytes = uneven(size, scale), off = offsets(bytes);
      const size_t total = off.back() + bytes.back();
      run_ranks(size, [&](Comm& c) {
        const int me = c.rank();
        // Own block in place, then sent from a separate input (copied into `out` by the algorithm).
        for (bool separate : {false, true}) {
          std::vector<char> out(total, 'x'), in(bytes[me]);
          for (size_t i = 0; i < bytes[me]; ++i) in[i] = pattern(me, 0, i);
          if (!separate) std::copy(in.begin(), in.end(), out.begin() + off[me]);
          c.reset();
          if (separate) {
            allgather_ring(c, in.data(), out.data(), bytes);
          } else {
            allgather_ring(c, out.data(), bytes);
          }
          for (int r = 0; r < size; ++r) {
            for (size_t i = 0; i < bytes[r]; ++i) {
              ASSERT_EQ(out[off[r] + i], pattern(r, 0, i))
                  << "block " << r << " byte " << i << (separate ? " (separate input)" : "");
            }
          }
        }
      });
    }
  }
}

// Out of place: the input must come back unchanged and nothing past this rank's block of `out` may
// be written. Pieces of 64 bytes make many pieces per block (and blocks of different lengths cut
// into different pieces); the default chunk makes one piece per block.
TEST(ReduceScatter, UnevenBlocksWithZeros) {
  for (size_t chunk_bytes : {size_t{64}, size_t{0}}) {
    std::unique_ptr<ChunkBytes> chunk(chunk_bytes ? new ChunkBytes(chunk_bytes) : nullptr);
    for (int size = 1; size <= 8; ++size) {
      for (size_t scale : {size_t{1}, size_t{40}}) {
        const std::vector<size_t> counts = uneven(size, scale), off = offsets(counts);
        const size_t total = off.back() + counts.back();
        for (auto [dt, op] : {std::pair{kFloat32, ReduceOp::Sum}, std::pair{kInt32, ReduceOp::Sum},
                              std::pair{kUInt8, ReduceOp::Max}, std::pair{kInt64, ReduceOp::Prod},
                              std::pair{kFloat64, ReduceOp::Min}}) {
          run_ranks(size, [&](Comm& c) {
            const int me = c.rank();
            const size_t es = element_size(dt);
            const std::vector<char> in = make_input(dt, me, total, op);
            std::vector<char> out(counts[me] * es + 8, 'x');
            c.reset();
            reduce_scatter_ring(c, in.data(), out.data(), counts, dt, op);
            ASSERT_EQ(check_reduced(dt, out.data(), size, counts[me], op, off[me]), "")
                << dtype_name(dt) << " block " << me << " of " << size << " chunk " << chunk_bytes;
            ASSERT_TRUE(in == make_input(dt, me, total, op)) << "input changed at rank " << me;
            ASSERT_EQ(std::string(out.end() - 8, out.end()), "xxxxxxxx") << "wrote past the block";
          });
        }
      }
    }
  }
}

// The same with each block in its own buffer, several collectives back to back on one Comm (the
// scratch regions are reused).
TEST(ReduceScatter, SeparateInputBlocks) {
  ChunkBytes chunk(256);
  for (int size = 1; size <= 8; ++size) {
    const std::vector<size_t> counts = uneven(size, 97), off = offsets(counts);
    const size_t total = off.back() + counts.back();
    run_ranks(size, [&](Comm& c) {
      const int me = c.rank();
      for (int round = 0; round < 3; ++round) {
        const ReduceOp op = round == 1 ? ReduceOp::Max : ReduceOp::Sum;
        const std::vector<char> all = make_input(kFloat32, me, total, op);
        std::vector<std::vector<char>> blocks(static_cast<size_t>(size));
        std::vector<const void*> ptrs(static_cast<size_t>(size));
        for (int r = 0; r < size; ++r) {
          blocks[r].assign(all.begin() + off[r] * 4, all.begin() + (off[r] + counts[r]) * 4);
          ptrs[r] = blocks[r].data();
        }
        std::vector<char> out(counts[me] * 4);
        c.reset();
        reduce_scatter_ring(c, ptrs, out.data(), counts, kFloat32, op);
        ASSERT_EQ(check_reduced(kFloat32, out.data(), size, counts[me], op, off[me]), "")
            << "round " << round << " block " << me << " of " << size;
      }
    });
  }
}

TEST(Gather, UnevenBlocksEveryRoot) {
  for (int size = 1; size <= 8; ++size) {
    const std::vector<size_t> bytes = uneven(size, 5), off = offsets(bytes);
    const size_t total = off.back() + bytes.back();
    for (int root = 0; root < size; ++root) {
      run_ranks(size, [&](Comm& c) {
        const int me = c.rank();
        std::vector<char> in(bytes[me]);
        for (size_t i = 0; i < in.size(); ++i) in[i] = pattern(me, 0, i);
        std::vector<char> out(me == root ? total : 0, 'x');
        c.reset();
        gather_linear(c, in.data(), out.data(), bytes, root);
        if (me != root) return;
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < bytes[r]; ++i) ASSERT_EQ(out[off[r] + i], pattern(r, 0, i));
        }
      });
    }
  }
}

TEST(Scatter, UnevenBlocksEveryRoot) {
  for (int size = 1; size <= 8; ++size) {
    const std::vector<size_t> bytes = uneven(size, 5), off = offsets(bytes);
    const size_t total = off.back() + bytes.back();
    for (int root = 0; root < size; ++root) {
      run_ranks(size, [&](Comm& c) {
        const int me = c.rank();
        std::vector<char> in(me == root ? total : 0);
        for (int r = 0; me == root && r < size; ++r) {
          for (size_t i = 0; i < bytes[r]; ++i) in[off[r] + i] = pattern(root, r, i);
        }
        std::vector<char> out(bytes[me], 'x');
        c.reset();
        scatter_linear(c, in.data(), out.data(), bytes, root);
        for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], pattern(root, me, i));
      });
    }
  }
}

TEST(Alltoallv, RandomSplits) {
  std::mt19937 rng(12345);
  for (int size = 1; size <= 8; ++size) {
    for (int trial = 0; trial < 3; ++trial) {
      // bytes[from][to], a quarter of them zero.
      std::vector<std::vector<size_t>> bytes(size, std::vector<size_t>(size));
      for (auto& row : bytes) {
        for (auto& b : row) b = rng() % 4 == 0 ? 0 : rng() % (trial == 2 ? 20000 : 40);
      }
      run_ranks(size, [&](Comm& c) {
        const int me = c.rank();
        std::vector<size_t> send = bytes[me], recv(size);
        for (int r = 0; r < size; ++r) recv[r] = bytes[r][me];
        // Blocks out of rank order, with gaps, to exercise the offsets.
        std::vector<size_t> send_off(size), recv_off(size);
        size_t s_total = 0, r_total = 0;
        for (int k = size - 1; k >= 0; --k) {
          send_off[k] = s_total;
          s_total += send[k] + 3;
          recv_off[k] = r_total;
          r_total += recv[k] + 1;
        }
        std::vector<char> in(s_total, 'y'), out(r_total, 'x');
        for (int to = 0; to < size; ++to) {
          for (size_t i = 0; i < send[to]; ++i) in[send_off[to] + i] = pattern(me, to, i);
        }
        c.reset();
        alltoallv_pairwise(c, in.data(), send, send_off, out.data(), recv, recv_off);
        for (int from = 0; from < size; ++from) {
          for (size_t i = 0; i < recv[from]; ++i) {
            ASSERT_EQ(out[recv_off[from] + i], pattern(from, me, i)) << "from " << from;
          }
          ASSERT_EQ(out[recv_off[from] + recv[from]], 'x') << "wrote past block " << from;
        }
      });
    }
  }
}

TEST(Barrier, NoRankLeavesBeforeAllArrive) {
  for (int size = 1; size <= 8; ++size) {
    std::atomic<int> arrived{0};
    run_ranks(size, [&](Comm& c) {
      for (int round = 1; round <= 10; ++round) {
        // Stagger arrivals so that an early leaver would be caught.
        std::this_thread::sleep_for(std::chrono::microseconds(((c.rank() * 7 + round) % 5) * 200));
        arrived.fetch_add(1);
        c.reset();
        barrier_dissemination(c);
        ASSERT_GE(arrived.load(), round * size)
            << "rank " << c.rank() << " left round " << round << " early";
      }
    });
  }
}

TEST(Collectives, BadArgumentsAreValueErrors) {
  run_ranks(2, [](Comm& c) {
    char b = 0;
    EXPECT_CONTAINS(loom::testing::error_of<ValueError>([&] { broadcast_binomial(c, &b, 1, 2); }),
                    "[dist] broadcast root 2");
    EXPECT_CONTAINS(
        loom::testing::error_of<ValueError>([&] { allgather_ring(c, &b, std::vector<size_t>{1}); }),
        "[dist] allgather expected 2 block sizes but got 1");
    EXPECT_CONTAINS(loom::testing::error_of<ValueError>(
                        [&] { reduce_binomial(c, &b, 1, kUInt8, ReduceOp::Sum, -1); }),
                    "[dist] reduce root -1");
  });
}

}  // namespace
}  // namespace loom::dist
