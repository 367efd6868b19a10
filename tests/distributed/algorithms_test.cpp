// Allreduce algorithms (ring, tree, double binary tree, recursive halving-doubling) on in-process
// groups of 1..8 ranks: every dtype and op against a reference computed in the test, counts 0, 1,
// odd, not divisible by the world size, and large enough for many pipeline pieces. Every rank must
// also end with the same bits.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "distributed/algorithms/algorithms.h"
#include "distributed/local_ranks.h"
#include "distributed/reduce_reference.h"
#include "distributed/store_test_util.h"
#include "loom/config.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::check_reduced;
using loom::testing::ChunkBytes;
using loom::testing::make_input;
using loom::testing::op_label;
using loom::testing::run_ranks;

struct Case {
  DType dt;
  ReduceOp op;
  size_t count;
};

using AllreduceFn = void (*)(Comm&, void*, size_t, DType, ReduceOp);

AllreduceFn algorithm(Algo a) {
  switch (a) {
    case Algo::Ring:
      return allreduce_ring;
    case Algo::Tree:
      return allreduce_tree;
    case Algo::DoubleBinaryTree:
      return allreduce_double_binary_tree;
    case Algo::HalvingDoubling:
      return allreduce_halving_doubling;
    case Algo::OneShot:
      return allreduce_one_shot;
    case Algo::Hierarchical:
      return allreduce_hierarchical;
    case Algo::HierarchicalTree:
      return allreduce_hierarchical_tree;
    case Algo::Auto:
    case Algo::Model:
      break;
  }
  return nullptr;
}

// Runs every case on one group (one thread per rank for all of them) and checks the results.
// `host_of` (optional): the hosts the ranks are told they run on (Comm::set_host_of).
void run_cases(int size, const std::vector<Case>& cases,
               const std::function<void(Comm&, void*, const Case&)>& call,
               const std::vector<int>& host_of = {}) {
  std::vector<std::vector<std::vector<char>>> got(cases.size(),
                                                  std::vector<std::vector<char>>(size));
  run_ranks(size, [&](Comm& c) {
    c.set_host_of(host_of);
    for (size_t k = 0; k < cases.size(); ++k) {
      const Case& cs = cases[k];
      std::vector<char> buf = make_input(cs.dt, c.rank(), cs.count, cs.op);
      c.reset();
      call(c, buf.data(), cs);
      got[k][static_cast<size_t>(c.rank())] = std::move(buf);
    }
  });
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& cs = cases[k];
    for (int r = 0; r < size; ++r) {
      const std::vector<char>& g = got[k][static_cast<size_t>(r)];
      EXPECT_EQ(check_reduced(cs.dt, g.data(), size, cs.count, cs.op), "")
          << dtype_name(cs.dt) << " " << op_label(cs.op) << " count " << cs.count << " rank " << r
          << " of " << size;
      EXPECT_TRUE(g == got[k][0]) << "ranks 0 and " << r << " disagree: " << dtype_name(cs.dt)
                                  << " " << op_label(cs.op) << " count " << cs.count;
    }
  }
}

std::vector<Case> small_cases(int size) {
  std::vector<Case> cases;
  const ReduceOp all_ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
  for (size_t count :
       {size_t{0}, size_t{1}, size_t{7}, static_cast<size_t>(size) * 3 + 1, size_t{1001}}) {
    for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kUInt8, kBool}) {
      for (ReduceOp op : all_ops) cases.push_back({dt, op, count});
    }
    for (DType dt : {kFloat16, kBFloat16}) {
      for (ReduceOp op : {ReduceOp::Min, ReduceOp::Max}) cases.push_back({dt, op, count});
    }
  }
  return cases;
}

class AllreduceTest : public ::testing::TestWithParam<std::tuple<Algo, int>> {};

TEST_P(AllreduceTest, EveryDtypeOpAndSmallCount) {
  auto [algo, size] = GetParam();
  ChunkBytes chunk(64);  // 1001 elements make 63..126 pieces
  AllreduceFn fn = algorithm(algo);
  run_cases(size, small_cases(size),
            [&](Comm& c, void* p, const Case& cs) { fn(c, p, cs.count, cs.dt, cs.op); });
}

TEST_P(AllreduceTest, LargeCountInManyPieces) {
  auto [algo, size] = GetParam();
  ChunkBytes chunk(4096);
  AllreduceFn fn = algorithm(algo);
  const size_t n = 100003;
  run_cases(
      size,
      {{kFloat32, ReduceOp::Sum, n}, {kFloat32, ReduceOp::Max, n}, {kInt64, ReduceOp::Sum, n}},
      [&](Comm& c, void* p, const Case& cs) { fn(c, p, cs.count, cs.dt, cs.op); });
}

INSTANTIATE_TEST_SUITE_P(Algorithms, AllreduceTest,
                         ::testing::Combine(::testing::Values(Algo::Ring, Algo::Tree,
                                                              Algo::DoubleBinaryTree,
                                                              Algo::HalvingDoubling, Algo::OneShot),
                                            ::testing::Range(1, 9)),
                         [](const ::testing::TestParamInfo<AllreduceTest::ParamType>& info) {
                           return std::string(algo_name(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "ranks";
                         });

TEST(AllreduceSelect, ThresholdsAndReasons) {
  std::string why;
  EXPECT_EQ(choose_allreduce(1 << 20, 2, Algo::Auto, &why), Algo::Ring);
  EXPECT_CONTAINS(why, "ring");
  EXPECT_EQ(choose_allreduce(16, 2, Algo::Auto, &why), Algo::OneShot);
  EXPECT_CONTAINS(why, "one step");
  EXPECT_EQ(choose_allreduce(16 << 10, 2, Algo::Auto), Algo::OneShot);
  EXPECT_EQ(choose_allreduce((16 << 10) + 4, 2, Algo::Auto), Algo::Ring);
  EXPECT_EQ(choose_allreduce(4096, 8, Algo::Auto, &why), Algo::HalvingDoubling);
  EXPECT_CONTAINS(why, "latency dominates");
  // Not a power of two: the boundary is blocks of 2 KiB.
  EXPECT_EQ(choose_allreduce((12 << 10) - 1, 6, Algo::Auto), Algo::HalvingDoubling);
  EXPECT_EQ(choose_allreduce(12 << 10, 6, Algo::Auto, &why), Algo::Ring);
  EXPECT_CONTAINS(why, "blocks of 2048 >= 2048");
  EXPECT_EQ(choose_allreduce(64 << 10, 3, Algo::Auto), Algo::Ring);
  // A power of two: halving-doubling up to 2 MiB, then the ring.
  EXPECT_EQ(choose_allreduce(16 << 10, 8, Algo::Auto, &why), Algo::HalvingDoubling);
  EXPECT_CONTAINS(why, "power of two");
  EXPECT_EQ(choose_allreduce(2 << 20, 4, Algo::Auto), Algo::HalvingDoubling);
  EXPECT_EQ(choose_allreduce((2 << 20) + 4, 4, Algo::Auto, &why), Algo::Ring);
  EXPECT_CONTAINS(why, "ring");
  EXPECT_EQ(choose_allreduce(16, 5, Algo::DoubleBinaryTree, &why), Algo::DoubleBinaryTree);
  EXPECT_CONTAINS(why, "forced");
  EXPECT_EQ(choose_allreduce(16, 5, Algo::Tree), Algo::Tree);
}

TEST(AllreduceSelect, ParsesNames) {
  for (Algo a : {Algo::Auto, Algo::Ring, Algo::Tree, Algo::DoubleBinaryTree, Algo::HalvingDoubling,
                 Algo::OneShot}) {
    EXPECT_EQ(parse_algo(algo_name(a)), a);
  }
  std::string msg = loom::testing::error_of<ValueError>([] { parse_algo("butterfly"); });
  EXPECT_CONTAINS(msg, "[dist] unknown allreduce algorithm 'butterfly'");
}

TEST(AllreduceSelect, ChunkBytesFromConfig) {
  {
    ChunkBytes chunk(1000);
    EXPECT_EQ(pipeline_chunk_bytes(), 1000u);
  }
  {
    ChunkBytes chunk(1);  // kept at a floor
    EXPECT_GE(pipeline_chunk_bytes(), 8u);
  }
  EXPECT_GE(pipeline_chunk_bytes(), 64u << 10);                          // the default
  EXPECT_THROW(config::set("LOOM_DIST_CHUNK_BYTES", "-5"), ValueError);  // refused where it enters
  {
    loom::testing::ScopedEnv env{{"LOOM_DIST_CHUNK_BYTES", "-5"}};
    config::set("LOOM_DIST_CHUNK_BYTES", "");  // moves the generation: read again
    EXPECT_CONTAINS(
        loom::testing::error_of<ValueError>([] { pipeline_chunk_bytes(); }),
        "LOOM_DIST_CHUNK_BYTES='-5' (from the environment) is not valid: expected an integer");
  }
  config::set("LOOM_DIST_CHUNK_BYTES", "");
}

TEST(AllreduceSelect, DispatchHonoursLoomAlgo) {
  ChunkBytes chunk(64);
  for (const char* name : {"", "ring", "tree", "dbt", "rhd"}) {
    config::set("LOOM_ALGO", name);
    run_cases(5, {{kFloat32, ReduceOp::Sum, 300}, {kInt32, ReduceOp::Max, 17}},
              [](Comm& c, void* p, const Case& cs) {
                allreduce(c, Algo::Auto, p, cs.count, cs.dt, cs.op);
              });
  }
  EXPECT_CONTAINS(
      loom::testing::error_of<ValueError>([] { config::set("LOOM_ALGO", "nope"); }),
      "LOOM_ALGO='nope' (set through config::set) is not valid: expected one of auto, ring, "
      "tree, dbt, rhd, oneshot, hier, hier_tree");
  config::set("LOOM_ALGO", "");  // the environment applies again
  loom::testing::ScopedEnv env{{"LOOM_ALGO", "nope"}};
  std::vector<char> one(4);
  std::string msg = loom::testing::error_of<ValueError>([&] {
    run_ranks(1,
              [&](Comm& c) { allreduce(c, Algo::Auto, one.data(), 1, kFloat32, ReduceOp::Sum); });
  });
  EXPECT_CONTAINS(msg, "LOOM_ALGO='nope' (from the environment) is not valid");
  config::set("LOOM_ALGO", "");
}

// Hierarchical allreduces (Note [Hierarchical allreduce]) on in-process groups told which host
// each rank runs on: even layouts run the 2D algorithm (reduce-scatter in each host, ring across,
// allgather in each host), uneven ones its tree variant; one host, or one rank a host, degenerate
// into rings. Hosts need not hold consecutive ranks.
struct Layout {
  const char* name;
  std::vector<int> host_of;
};

const Layout kLayouts[] = {
    {"2x2", {0, 0, 1, 1}},
    {"2x2_interleaved", {0, 1, 0, 1}},
    {"3x2", {0, 0, 1, 1, 2, 2}},
    {"2x3", {0, 0, 0, 1, 1, 1}},
    {"2x4", {0, 1, 0, 1, 0, 1, 0, 1}},
    {"uneven_3_1", {0, 0, 0, 1}},
    {"uneven_1_2_3", {0, 1, 1, 2, 2, 2}},
    {"one_host", {0, 0, 0, 0, 0}},
    {"one_rank_a_host", {0, 1, 2}},
    {"single", {0}},
};

class HierarchicalTest : public ::testing::TestWithParam<std::tuple<Algo, int>> {};

TEST_P(HierarchicalTest, EveryDtypeOpAndSmallCount) {
  auto [algo, layout] = GetParam();
  const Layout& l = kLayouts[layout];
  const int size = static_cast<int>(l.host_of.size());
  ChunkBytes chunk(64);
  AllreduceFn fn = algorithm(algo);
  run_cases(
      size, small_cases(size),
      [&](Comm& c, void* p, const Case& cs) { fn(c, p, cs.count, cs.dt, cs.op); }, l.host_of);
}

TEST_P(HierarchicalTest, LargeCountInManyPieces) {
  auto [algo, layout] = GetParam();
  const Layout& l = kLayouts[layout];
  const int size = static_cast<int>(l.host_of.size());
  ChunkBytes chunk(4096);
  AllreduceFn fn = algorithm(algo);
  const size_t n = 100003;
  run_cases(
      size, {{kFloat32, ReduceOp::Sum, n}, {kFloat64, ReduceOp::Max, n}},
      [&](Comm& c, void* p, const Case& cs) { fn(c, p, cs.count, cs.dt, cs.op); }, l.host_of);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, HierarchicalTest,
    ::testing::Combine(::testing::Values(Algo::Hierarchical, Algo::HierarchicalTree),
                       ::testing::Range(0, static_cast<int>(std::size(kLayouts)))),
    [](const ::testing::TestParamInfo<HierarchicalTest::ParamType>& info) {
      return std::string(algo_name(std::get<0>(info.param))) + "_" +
             kLayouts[std::get<1>(info.param)].name;
    });

TEST(HostLayout, GroupsRanksByHost) {
  std::vector<HostLayout> got(6);
  run_ranks(6, [&](Comm& c) {
    c.set_host_of({0, 1, 1, 0, 1, 0});
    got[static_cast<size_t>(c.rank())] = host_layout(c);
  });
  EXPECT_EQ(got[4].hosts, 2);
  EXPECT_TRUE(got[4].even);
  EXPECT_EQ(got[4].local, (std::vector<int>{1, 2, 4}));
  EXPECT_EQ(got[4].local_rank, 2);
  EXPECT_EQ(got[4].cross, (std::vector<int>{5, 4}));
  EXPECT_EQ(got[4].leaders, (std::vector<int>{0, 1}));
  EXPECT_EQ(got[3].cross, (std::vector<int>{3, 2}));
}

// Inside a SubGroup the Comm counts within the members; a lost peer is named by its group rank.
TEST(SubGroup, RanksAreTheMembersAndErrorsNameGroupRanks) {
  std::vector<std::pair<int, int>> seen(4);
  run_ranks(4, [&](Comm& c) {
    std::vector<int> odd_even = c.rank() % 2 ? std::vector<int>{3, 1} : std::vector<int>{0, 2};
    {
      Comm::SubGroup g(c, odd_even);
      seen[static_cast<size_t>(c.world_rank())] = {c.rank(), c.size()};
      int v = c.world_rank(), other = -1;
      Request* r = c.irecv(1 - c.rank(), &other, sizeof(other));
      c.wait(c.isend(1 - c.rank(), &v, sizeof(v)));
      c.wait(r);
      LOOM_CHECK(other == odd_even[static_cast<size_t>(1 - c.rank())], "got ", other);
    }
    LOOM_CHECK(c.rank() == c.world_rank() && c.size() == 4, "restored");
  });
  EXPECT_EQ(seen[3], (std::pair<int, int>{0, 2}));
  EXPECT_EQ(seen[1], (std::pair<int, int>{1, 2}));
  EXPECT_EQ(seen[2], (std::pair<int, int>{1, 2}));
  // Rank 2 of the group (member 1 of {0, 2}) waits for a message member 0 never sends.
  std::string msg = loom::testing::error_of<DistError>([] {
    run_ranks(4, [](Comm& c) {
      if (c.world_rank() != 2) return;
      c.set_context("test", Clock::now() + std::chrono::milliseconds(200));
      Comm::SubGroup g(c, {0, 2});
      int v = 0;
      c.recv(0, &v, sizeof(v));
    });
  });
  EXPECT_CONTAINS(msg, "rank 2 lost rank 0: timed out waiting to receive 4 bytes");
}

}  // namespace
}  // namespace loom::dist
