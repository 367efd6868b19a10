// The in-process link (messages in order, size mismatches and closed peers as DistError) and the
// shapes of the trees the tree algorithms use.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "distributed/algorithms/tree_pipeline.h"
#include "distributed/local_ranks.h"
#include "distributed/transport/local_link.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::error_of;
using loom::testing::run_ranks;

TEST(LocalLink, MessagesArriveInOrderEvenBeforeTheirReceive) {
  auto comms = make_local_comms(2);
  EXPECT_STREQ(comms[0]->link_kind(1), "local");
  int a = 1, b = 2, x = 0, y = 0;
  comms[0]->wait(comms[0]->isend(1, &a, sizeof a));
  comms[0]->wait(comms[0]->isend(1, &b, sizeof b));
  Request* rx = comms[1]->irecv(0, &x, sizeof x);
  Request* ry = comms[1]->irecv(0, &y, sizeof y);
  comms[1]->wait(ry);
  EXPECT_TRUE(rx->complete);
  EXPECT_EQ(x, 1);
  EXPECT_EQ(y, 2);
}

TEST(LocalLink, SizeMismatchIsDistErrorNamingBothRanks) {
  auto comms = make_local_comms(3);
  double v = 1;
  float f = 0;
  comms[2]->send(1, &v, sizeof v);
  comms[1]->set_context("allreduce #3", Clock::now() + std::chrono::seconds(10));
  std::string msg = error_of<DistError>([&] { comms[1]->recv(2, &f, sizeof f); });
  EXPECT_CONTAINS(msg, "[dist] allreduce #3");
  EXPECT_CONTAINS(msg, "rank 2 sent 8 bytes but rank 1 expected 4");
}

TEST(LocalLink, MismatchAcrossThreadsFailsTheCollective) {
  std::string msg = error_of<DistError>([] {
    run_ranks(2, [](Comm& c) {
      std::vector<char> buf(c.rank() == 0 ? 16 : 12);
      if (c.rank() == 0) {
        c.send(1, buf.data(), buf.size());
      } else {
        c.recv(0, buf.data(), buf.size());
      }
    });
  });
  EXPECT_CONTAINS(msg, "rank 0 sent 16 bytes but rank 1 expected 12");
}

TEST(LocalLink, ClosedPeerIsDistError) {
  auto comms = make_local_comms(2);
  int x = 0;
  comms[0]->close_all();
  EXPECT_CONTAINS(error_of<DistError>([&] { comms[1]->recv(0, &x, sizeof x); }),
                  "rank 1 lost rank 0");
  EXPECT_CONTAINS(error_of<DistError>([&] { comms[1]->send(0, &x, sizeof x); }), "rank 0");
  EXPECT_THROW(make_local_comms(0), ValueError);
}

TEST(TreeShapes, SpanningTreesWithComplementaryLeaves) {
  for (int size = 1; size <= 64; ++size) {
    for (int which = 0; which < 2; ++which) {
      auto node = [&](int r) {
        return which == 0 ? btree_node(size, r) : btree_complement_node(size, r);
      };
      int roots = 0;
      for (int r = 0; r < size; ++r) {
        TreeNode n = node(r);
        if (n.parent < 0) {
          ++roots;
        } else {
          // Our parent lists us as a child, and walking up ends at the root within size steps.
          TreeNode p = node(n.parent);
          EXPECT_TRUE(p.child[0] == r || p.child[1] == r) << size << " " << r;
          int hops = 0;
          for (int x = r; node(x).parent >= 0 && hops <= size; x = node(x).parent) ++hops;
          EXPECT_LE(hops, btree_depth(size)) << size << " " << r;
          if (which == 0) {
            EXPECT_EQ(hops, btree_level(size, r)) << size << " " << r;
          }
        }
        for (int i = 0; i < n.num_children; ++i) EXPECT_EQ(node(n.child[i]).parent, r);
      }
      EXPECT_EQ(roots, 1) << size;
    }
    // Every rank is a leaf in one of the trees (but rank 0 for odd sizes above 1).
    for (int r = 0; r < size; ++r) {
      bool leaf =
          btree_node(size, r).num_children == 0 || btree_complement_node(size, r).num_children == 0;
      if (size > 2 && !(size % 2 == 1 && r == 0)) {
        EXPECT_TRUE(leaf) << size << " " << r;
      }
    }
  }
}

}  // namespace
}  // namespace loom::dist
