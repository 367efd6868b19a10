// Process groups across real processes: every collective over shared memory and TCP, every
// allreduce algorithm, dtypes (bf16 accumulated in f32), async work, sub-groups, contract checking,
// dead and hung ranks, abort, and the flight recorder.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "distributed/multiprocess.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::make_group;
using loom::testing::RankResult;
using loom::testing::run_processes;

float value(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * 0.5 + static_cast<double>(i % 7));
}

Tensor rank_tensor(int rank, int64_t n, DType dt = kFloat32) {
  Tensor t = empty({n}, TensorOptions(kFloat32));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value(rank, i);
  return dt == kFloat32 ? t : t.to(dt);
}

double reference(ReduceOp op, int size, int64_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    double v = value(r, i);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Avg:
        acc += v;
        break;
      case ReduceOp::Prod:
        acc *= v;
        break;
      case ReduceOp::Min:
        acc = std::min(acc, v);
        break;
      case ReduceOp::Max:
        acc = std::max(acc, v);
        break;
    }
  }
  return op == ReduceOp::Avg ? acc / size : acc;
}

void check_values(const Tensor& t, const std::function<double(int64_t)>& want, double tol,
                  const std::string& what) {
  Tensor f = t.to(kFloat64).contiguous();
  const double* p = f.data_ptr<double>();
  for (int64_t i = 0; i < f.numel(); ++i) {
    double w = want(i);
    CHILD_CHECK(std::fabs(p[i] - w) <= tol * std::max(1.0, std::fabs(w)),
                what << ": element " << i << " is " << p[i] << ", expected " << w);
  }
}

void expect_ok(const std::vector<RankResult>& res) {
  for (size_t r = 0; r < res.size(); ++r) {
    EXPECT_EQ(res[r].exit_code, 0) << "rank " << r << ": " << res[r].output;
  }
}

class Transports : public ::testing::TestWithParam<std::string> {};

TEST_P(Transports, AllreduceEveryAlgorithmOpAndSize) {
  std::string transport = GetParam();
  for (int size : {2, 3, 4}) {
    auto res = run_processes(size, [&](int rank, const std::string& path) {
      ProcessGroupOptions o;
      o.transport = transport;
      auto store = std::make_shared<FileStore>(path);
      for (const char* algo : {"ring", "tree", "dbt", "rhd"}) {
        o.algo = algo;
        o.name = std::string("g-") + algo;
        o.timeout = std::chrono::seconds(20);
        auto pg = ProcessGroup::create(store, rank, size, o);
        for (int64_t n :
             {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{size * 3 + 1}, int64_t{300001}}) {
          for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
            Tensor t = rank_tensor(rank, n);
            pg->allreduce(t, op);
            check_values(
                t, [&](int64_t i) { return reference(op, size, i); }, 1e-6,
                std::string(algo) + " " + reduce_op_name(op) + " n=" + std::to_string(n));
          }
        }
        Tensor p = rank_tensor(rank, 33, kFloat64);
        pg->allreduce(p, ReduceOp::Prod);
        check_values(
            p, [&](int64_t i) { return reference(ReduceOp::Prod, size, i); }, 1e-12, "prod f64");
        CHILD_CHECK(pg->describe().find(algo) != std::string::npos, pg->describe());
      }
    });
    expect_ok(res);
  }
}

TEST_P(Transports, EveryCollective) {
  std::string transport = GetParam();
  const int size = 3;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    ProcessGroupOptions o;
    o.transport = transport;
    auto pg = make_group(rank, size, path, o);
    // broadcast from each root, int64 and a non-contiguous view.
    for (int root = 0; root < size; ++root) {
      Tensor t = full({5}, Scalar(int64_t{rank * 10}), TensorOptions(kInt64));
      pg->broadcast(t, root);
      check_values(
          t, [&](int64_t) { return root * 10.0; }, 0, "broadcast");
      Tensor m = rank_tensor(rank, 12).reshape({3, 4}).transpose(0, 1);
      pg->broadcast(m, root);
      Tensor want = rank_tensor(root, 12).reshape({3, 4}).transpose(0, 1);
      Tensor md = m.contiguous(), wd = want.contiguous();
      check_values(
          md, [&](int64_t i) { return wd.data_ptr<float>()[i]; }, 0, "broadcast view");
    }
    // reduce to each root.
    for (int root = 0; root < size; ++root) {
      Tensor t = rank_tensor(rank, 10);
      pg->reduce(t, root, ReduceOp::Sum);
      if (rank == root) {
        check_values(
            t, [&](int64_t i) { return reference(ReduceOp::Sum, size, i); }, 1e-6, "reduce");
      } else {
        check_values(
            t, [&](int64_t i) { return value(rank, i); }, 0, "reduce leaves non-roots");
      }
    }
    // uneven allgather: rank r contributes r+1 elements.
    std::vector<Tensor> outs;
    for (int r = 0; r < size; ++r) outs.push_back(empty({r + 1}, TensorOptions(kFloat32)));
    pg->allgather(outs, rank_tensor(rank, rank + 1));
    for (int r = 0; r < size; ++r) {
      check_values(
          outs[static_cast<size_t>(r)], [&](int64_t i) { return value(r, i); }, 0, "allgather");
    }
    Tensor all = empty({size * 4}, TensorOptions(kInt32));
    pg->allgather_into_tensor(all, full({4}, Scalar(int64_t{rank + 1}), TensorOptions(kInt32)));
    check_values(
        all, [&](int64_t i) { return static_cast<double>(i / 4 + 1); }, 0, "allgather_into_tensor");
    // reduce_scatter with uneven blocks.
    std::vector<Tensor> ins;
    for (int r = 0; r < size; ++r) ins.push_back(rank_tensor(rank, 2 * r + 1));
    Tensor out = empty({2 * rank + 1}, TensorOptions(kFloat32));
    pg->reduce_scatter(out, ins, ReduceOp::Max);
    check_values(
        out, [&](int64_t i) { return reference(ReduceOp::Max, size, i); }, 0, "reduce_scatter");
    Tensor big = rank_tensor(rank, size * 6);
    Tensor piece = empty({6}, TensorOptions(kFloat32));
    pg->reduce_scatter_tensor(piece, big, ReduceOp::Sum);
    check_values(
        piece, [&](int64_t i) { return reference(ReduceOp::Sum, size, rank * 6 + i); }, 1e-6,
        "reduce_scatter_tensor");
    // alltoall: block j of rank r holds 100*r + j.
    Tensor a_in = empty({size * 2}, TensorOptions(kInt64)),
           a_out = empty({size * 2}, TensorOptions(kInt64));
    for (int64_t i = 0; i < size * 2; ++i) a_in.data_ptr<int64_t>()[i] = 100 * rank + i / 2;
    pg->alltoall(a_out, a_in);
    check_values(
        a_out, [&](int64_t i) { return 100.0 * static_cast<double>(i / 2) + rank; }, 0, "alltoall");
    // alltoallv: rank r sends (r + p) % 3 elements to p, valued 1000*r + p.
    std::vector<int64_t> in_s, out_s;
    int64_t in_n = 0, out_n = 0;
    for (int p = 0; p < size; ++p) {
      in_s.push_back((rank + p) % 3);
      out_s.push_back((p + rank) % 3);
      in_n += in_s.back();
      out_n += out_s.back();
    }
    Tensor v_in = empty({in_n}, TensorOptions(kInt64)),
           v_out = empty({out_n}, TensorOptions(kInt64));
    for (int p = 0, k = 0; p < size; ++p) {
      for (int64_t j = 0; j < in_s[static_cast<size_t>(p)]; ++j)
        v_in.data_ptr<int64_t>()[k++] = 1000 * rank + p;
    }
    pg->alltoallv(v_out, v_in, out_s, in_s);
    for (int p = 0, k = 0; p < size; ++p) {
      for (int64_t j = 0; j < out_s[static_cast<size_t>(p)]; ++j, ++k) {
        CHILD_CHECK(v_out.data_ptr<int64_t>()[k] == 1000 * p + rank, "alltoallv element " << k);
      }
    }
    // gather / scatter at root 1.
    std::vector<Tensor> g_outs;
    if (rank == 1) {
      for (int r = 0; r < size; ++r) g_outs.push_back(empty({3}, TensorOptions(kFloat64)));
    }
    pg->gather(g_outs, rank_tensor(rank, 3, kFloat64), 1);
    if (rank == 1) {
      for (int r = 0; r < size; ++r)
        check_values(
            g_outs[static_cast<size_t>(r)], [&](int64_t i) { return value(r, i); }, 0, "gather");
    }
    std::vector<Tensor> s_ins;
    if (rank == 1) {
      for (int r = 0; r < size; ++r)
        s_ins.push_back(full({2}, Scalar(int64_t{r * 7}), TensorOptions(kInt16)));
    }
    Tensor s_out = empty({2}, TensorOptions(kInt16));
    pg->scatter(s_out, s_ins, 1);
    check_values(
        s_out, [&](int64_t) { return rank * 7.0; }, 0, "scatter");
    pg->barrier();
    // send / recv around a ring, bool dtype.
    Tensor token = full({9}, Scalar(rank % 2 == 0), TensorOptions(kBool));
    Tensor got = empty({9}, TensorOptions(kBool));
    auto w = pg->send(token, (rank + 1) % size, {true});
    pg->recv(got, (rank + size - 1) % size);
    w->wait();
    check_values(
        got, [&](int64_t) { return ((rank + size - 1) % size) % 2 == 0 ? 1.0 : 0.0; }, 0, "recv");
    CHILD_CHECK(pg->sequence_number() > 10, pg->sequence_number());
  });
  expect_ok(res);
}

INSTANTIATE_TEST_SUITE_P(Dist, Transports, ::testing::Values("shm", "tcp"));

TEST(ProcessGroup, HalfPrecisionSumsAccumulateInFloat32) {
  const int size = 4;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, size, path);
    // 256 + 1 + 1 + 1 in bf16 pairwise rounds to 256 at each step; in f32 it is 259 -> bf16 260.
    for (DType dt : {kBFloat16, kFloat16}) {
      Tensor t = full({1000}, Scalar(rank == 0 ? 256.0 : 1.0), TensorOptions(dt));
      pg->allreduce(t, ReduceOp::Sum);
      double want = static_cast<float>(dt == kBFloat16 ? static_cast<float>(BFloat16(259.0f))
                                                       : static_cast<float>(Half(259.0f)));
      check_values(
          t, [&](int64_t) { return want; }, 0, dtype_name(dt));
      Tensor m = rank_tensor(rank, 50, dt);
      pg->allreduce(m, ReduceOp::Max);
      check_values(
          m, [&](int64_t i) { return reference(ReduceOp::Max, size, i); }, 0, "max half");
    }
  });
  expect_ok(res);
}

TEST(ProcessGroup, AsyncWorkCompletesInOrder) {
  const int size = 2;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, size, path);
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> ws;
    for (int k = 0; k < 20; ++k) {
      ts.push_back(full({1000}, Scalar(int64_t{k + rank}), TensorOptions(kInt64)));
      ws.push_back(pg->allreduce(ts.back(), ReduceOp::Sum, {true}));
    }
    Tensor sync = full({3}, Scalar(int64_t{1}), TensorOptions(kInt64));
    pg->allreduce(sync);  // runs after the queued ones
    for (int k = 0; k < 20; ++k) {
      CHILD_CHECK(ws[static_cast<size_t>(k)]->is_completed(), "work " << k);
      CHILD_CHECK(ws[static_cast<size_t>(k)]->sequence_number() == static_cast<uint64_t>(k), "seq");
      check_values(
          ts[static_cast<size_t>(k)], [&](int64_t) { return 2.0 * k + 1; }, 0, "async");
    }
    // wait with a timeout that expires: the peer joins only after 300 ms.
    Tensor late = full({4}, Scalar(int64_t{1}), TensorOptions(kInt64));
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto w = pg->allreduce(late, ReduceOp::Sum, {true});
    if (rank == 0) CHILD_CHECK(!w->wait(std::chrono::milliseconds(20)), "wait should time out");
    CHILD_CHECK(w->wait(), "wait");
    CHILD_CHECK(w->exception() == nullptr, "no exception");
  });
  expect_ok(res);
}

TEST(ProcessGroup, SubgroupsWithoutNonMembersAndSplit) {
  const int size = 4;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, size, path);
    if (rank == 0 || rank == 2) {  // ranks 1 and 3 never call new_group
      auto sub = pg->new_group({2, 0});
      CHILD_CHECK(sub && sub->size() == 2 && sub->rank() == rank / 2, "sub rank");
      Tensor t = full({6}, Scalar(int64_t{rank + 1}), TensorOptions(kInt64));
      sub->allreduce(t);
      check_values(
          t, [](int64_t) { return 4.0; }, 0, "subgroup sum");
    }
    auto odd_even = pg->split(rank % 2, -rank);  // key reverses the order
    CHILD_CHECK(odd_even && odd_even->size() == 2, "split size");
    CHILD_CHECK(odd_even->rank() == (rank < 2 ? 1 : 0), "split rank " << odd_even->rank());
    Tensor t = full({3}, Scalar(int64_t{rank}), TensorOptions(kInt64));
    odd_even->allreduce(t, ReduceOp::Max);
    check_values(
        t, [&](int64_t) { return rank % 2 == 0 ? 2.0 : 3.0; }, 0, "split max");
    auto none = pg->split(rank == 3 ? -1 : 0, 0);
    CHILD_CHECK((rank == 3) == (none == nullptr), "color -1 gives no group");
    Tensor w = full({2}, Scalar(int64_t{1}), TensorOptions(kInt64));
    pg->allreduce(w);  // the parent still works
    check_values(
        w, [&](int64_t) { return 4.0; }, 0, "parent");
  });
  expect_ok(res);
}

// ---- contract ----

struct Mismatch {
  const char* name;
  std::function<void(ProcessGroup&, int)> call;
  std::vector<std::string> fragments;
};

TEST(ProcessGroup, ContractMismatchesAreNamedOnEveryRank) {
  std::vector<Mismatch> cases = {
      {"op",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({8}, Scalar(1.0), TensorOptions(kFloat32));
         if (rank == 0)
           pg.allreduce(t);
         else
           pg.broadcast(t, 0);
       },
       {"sequence number 1", "rank 0 called allreduce", "rank 1 called broadcast",
        "op (rank 0: allreduce, rank 1: broadcast)"}},
      {"dtype",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({8}, Scalar(1.0), TensorOptions(rank == 0 ? kFloat32 : kFloat64));
         pg.allreduce(t);
       },
       {"dtype (rank 0: float32, rank 1: float64)"}},
      {"count",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({rank == 0 ? 8 : 9}, Scalar(1.0), TensorOptions(kFloat32));
         pg.allreduce(t);
       },
       {"count (rank 0: 8, rank 1: 9)"}},
      {"root",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({8}, Scalar(1.0), TensorOptions(kFloat32));
         pg.broadcast(t, rank);
       },
       {"root (rank 0: 0, rank 1: 1)"}},
      {"reduce op",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({8}, Scalar(1.0), TensorOptions(kFloat32));
         pg.allreduce(t, rank == 0 ? ReduceOp::Sum : ReduceOp::Max);
       },
       {"reduce op (rank 0: sum, rank 1: max)"}},
      {"order",
       [](ProcessGroup& pg, int rank) {
         Tensor t = full({8}, Scalar(1.0), TensorOptions(kFloat32));
         Tensor u = full({4}, Scalar(int64_t{1}), TensorOptions(kInt64));
         if (rank == 0) {
           pg.allreduce(t);
           pg.allreduce(u);
         } else {
           pg.allreduce(u);
           pg.allreduce(t);
         }
       },
       {"sequence number 1", "rank 0 called allreduce(float32[8]",
        "rank 1 called allreduce(int64[4]"}},
  };
  for (const Mismatch& m : cases) {
    auto res = run_processes(2, [&](int rank, const std::string& path) {
      ProcessGroupOptions o;
      o.debug_detail = 1;
      auto pg = make_group(rank, 2, path, o);
      Tensor warm = full({2}, Scalar(1.0), TensorOptions(kFloat32));
      pg->allreduce(warm);  // sequence number 0 agrees
      std::string err;
      try {
        m.call(*pg, rank);
      } catch (const DistError& e) {
        err = e.what();
      }
      CHILD_CHECK(!err.empty(), m.name << ": no error");
      for (const std::string& f : m.fragments)
        CHILD_CHECK(err.find(f) != std::string::npos, m.name << ": '" << f << "' not in: " << err);
      // The contract check moved no data: the group still works.
      Tensor after = full({3}, Scalar(2.0), TensorOptions(kFloat32));
      pg->allreduce(after);
      check_values(
          after, [](int64_t) { return 4.0; }, 0, "after mismatch");
    });
    for (size_t r = 0; r < res.size(); ++r)
      EXPECT_EQ(res[r].exit_code, 0) << m.name << " rank " << r << ": " << res[r].output;
  }
}

// ---- waiting ----

// With no spinning and no yielding, every wait that finds nothing sleeps on the shared-memory
// doorbell at once, so peers' notifications carry the whole exchange (Note [Doorbells] in
// src/distributed/transport/communicator.h). A lost wake-up would leave a sleep to run to its 10 ms
// bound: many such, and the 300 small collectives below would take seconds. Results are checked as
// well, for every size from inline messages to ones read by address.
TEST(ProcessGroup, SleepingWaitsAreWokenByPeers) {
  const int size = 3;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    setenv("LOOM_DIST_SPIN_US", "0", 1);
    setenv("LOOM_DIST_YIELD_US", "0", 1);
    ProcessGroupOptions o;
    o.transport = "shm";
    auto pg = make_group(rank, size, path, o);
    for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{1} << 18}) {
      Tensor t = rank_tensor(rank, n);
      pg->allreduce(t);
      check_values(
          t, [&](int64_t i) { return reference(ReduceOp::Sum, size, i); }, 1e-5, "allreduce");
      Tensor b = rank_tensor(rank, n);
      pg->broadcast(b, size - 1);
      check_values(
          b, [&](int64_t i) { return value(size - 1, i); }, 0, "broadcast");
    }
    for (int i = 0; i < 300; ++i) {
      Tensor t = full({4}, Scalar(1.0), TensorOptions(kFloat32));
      pg->allreduce(t);
      CHILD_CHECK(t.data_ptr<float>()[3] == size, "allreduce " << i);
    }
    const std::string d = pg->describe();
    const size_t at = d.find("waits slept ");
    CHILD_CHECK(at != std::string::npos, d);
    const long sleeps = std::atol(d.c_str() + at + 12);
    const size_t open = d.find('(', at);
    const long unwoken = std::atol(d.c_str() + open + 1);
    CHILD_CHECK(sleeps >= 10, d);
    // Tolerates a peer descheduled for 10 ms now and then on a loaded machine, not lost wake-ups
    // (without notifications every sleep runs to its bound).
    CHILD_CHECK(unwoken * 4 <= sleeps, d);
  });
  expect_ok(res);
}

// Large messages over shared memory are read by the receiver and, while the sender waits, written
// by the sender too, piece by piece (Note [Cooperative copies] in
// src/distributed/transport/shm_link.cpp). Messages of many sizes (none a whole number of pieces)
// go back to back, so a piece copied for the wrong message, at the wrong offset or twice would show
// in the values. The receiver copies each message out the moment its receive completes and then
// overwrites it: a piece still on its way then (a receive completed too early) shows as missing in
// the copy or as written over the overwrite. The sender must have helped.
TEST(ProcessGroup, LargeMessagesAreCopiedByBothSides) {
  const int size = 2;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    ProcessGroupOptions o;
    o.transport = "shm";
    auto pg = make_group(rank, size, path, o);
    auto pattern = [](int64_t msg, int64_t i) {
      return static_cast<float>((msg * 7919 + i) % 65521);
    };
    const std::vector<int64_t> numels = {(1 << 17) + 1, (1 << 19) + 3, (3 << 18) + 5,
                                         (1 << 21) + 7};
    int64_t msg = 0;
    for (int round = 0; round < 30; ++round) {
      // Point to point, several in flight: rank 0 sends, rank 1 receives into fresh tensors.
      std::vector<Tensor> got, snapshot;
      std::vector<std::shared_ptr<Work>> sent;
      for (int64_t n : numels) {
        Tensor t = empty({n}, TensorOptions(kFloat32));
        float* p = t.data_ptr<float>();
        for (int64_t i = 0; i < n; ++i) p[i] = rank == 0 ? pattern(msg, i) : -1.0f;
        if (rank == 0) {
          sent.push_back(pg->send(t, 1, {true}));
        } else {
          pg->recv(t, 0);
          snapshot.push_back(t.clone());
          std::fill(p, p + n, -2.0f);
          got.push_back(t);
        }
        ++msg;
      }
      for (auto& w : sent) w->wait();
      for (size_t k = 0; k < got.size(); ++k) {
        const float* p = snapshot[k].data_ptr<float>();
        const float* after = got[k].data_ptr<float>();
        const int64_t m = msg - static_cast<int64_t>(numels.size()) + static_cast<int64_t>(k);
        for (int64_t i = 0; i < got[k].numel(); ++i) {
          CHILD_CHECK(p[i] == pattern(m, i), "message " << m << " element " << i << " is " << p[i]);
          CHILD_CHECK(after[i] == -2.0f, "message " << m << " element " << i
                                                    << " was written after "
                                                    << "its receive completed: " << after[i]);
        }
      }
      // A broadcast, where the root has nothing else to do but help.
      Tensor b = full({(1 << 20) + 9}, Scalar(rank == 0 ? 2.5 : 0.0), TensorOptions(kFloat32));
      pg->broadcast(b, 0);
      check_values(
          b, [](int64_t) { return 2.5; }, 0, "broadcast");
    }
    if (rank == 0) {
      const std::string d = pg->describe();
      CHILD_CHECK(d.find("bytes into peers' receives while waiting") != std::string::npos, d);
    }
  });
  expect_ok(res);
}

// Both ranks send everything before receiving anything, more than a shared-memory ring holds: the
// messages must be held aside until their receives are posted (or both ranks would wait for ring
// space forever), in order, with their values, streamed through the rings and read by address.
TEST(ProcessGroup, MessagesAheadOfTheirReceivesAreHeld) {
  for (bool streamed : {true, false}) {
    const int size = 2;
    auto res = run_processes(size, [&](int rank, const std::string& path) {
      if (streamed) setenv("LOOM_SHM_NO_CMA", "1", 1);
      ProcessGroupOptions o;
      o.transport = "shm";
      auto pg = make_group(rank, size, path, o);
      const int peer = 1 - rank;
      auto pattern = [](int from, int64_t msg, int64_t i) {
        return static_cast<float>(from * 100000 + msg * 1000 + i % 997);
      };
      const std::vector<int64_t> numels = {2, 1025, 25000, 700000, 3, 300000, 700001};
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<std::shared_ptr<Work>> sent;
        std::vector<Tensor> keep;
        for (size_t m = 0; m < numels.size(); ++m) {
          Tensor t = empty({numels[m]}, TensorOptions(kFloat32));
          float* p = t.data_ptr<float>();
          for (int64_t i = 0; i < numels[m]; ++i) p[i] = pattern(rank, static_cast<int64_t>(m), i);
          sent.push_back(pg->send(t, peer, {true}));
          keep.push_back(t);
        }
        for (size_t m = 0; m < numels.size(); ++m) {
          Tensor t = full({numels[m]}, Scalar(-1.0), TensorOptions(kFloat32));
          pg->recv(t, peer);
          const float* p = t.data_ptr<float>();
          for (int64_t i = 0; i < numels[m]; ++i) {
            CHILD_CHECK(p[i] == pattern(peer, static_cast<int64_t>(m), i),
                        "message " << m << " element " << i << " is " << p[i]);
          }
        }
        for (auto& w : sent) w->wait();
      }
    });
    for (size_t r = 0; r < res.size(); ++r) {
      EXPECT_EQ(res[r].exit_code, 0)
          << (streamed ? "streamed" : "by address") << ", rank " << r << ": " << res[r].output;
    }
  }
}

// ---- faults ----

TEST(ProcessGroup, DeadRankIsNamedWithinTheTimeout) {
  for (const char* transport : {"shm", "tcp"}) {
    const int size = 3;
    std::string dir = loom::testing::make_temp_dir();
    auto t0 = std::chrono::steady_clock::now();
    auto res = run_processes(
        size,
        [&](int rank, const std::string& path) {
          setenv("LOOM_FLIGHT_DIR", dir.c_str(), 1);
          ProcessGroupOptions o;
          o.transport = transport;
          o.timeout = std::chrono::seconds(10);
          auto pg = make_group(rank, size, path, o);
          Tensor t = full({1 << 16}, Scalar(1.0), TensorOptions(kFloat32));
          pg->allreduce(t);
          if (rank == 1) std::_Exit(7);  // dies before the second collective
          std::string err = loom::testing::error_of<DistError>([&] { pg->allreduce(t); });
          CHILD_CHECK(
              err.find("allreduce") != std::string::npos && err.find("#1") != std::string::npos,
              err);
          CHILD_CHECK(err.find("rank 1") != std::string::npos, err);
          CHILD_CHECK(err.find("flight record") != std::string::npos, err);
          // The group is unusable afterwards, with a clear error.
          std::string again = loom::testing::error_of<DistError>([&] { pg->barrier(); });
          CHILD_CHECK(again.find("failed earlier") != std::string::npos, again);
        },
        40);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(res[1].exit_code, 7);
    EXPECT_EQ(res[0].exit_code, 0) << transport << ": " << res[0].output;
    EXPECT_EQ(res[2].exit_code, 0) << transport << ": " << res[2].output;
    EXPECT_LT(secs, 15.0) << transport;
    std::ifstream f(dir + "/flight-world-rank0.json");
    std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    EXPECT_CONTAINS(all, "\"state\":\"failed\"");
    EXPECT_CONTAINS(all, "\"state\":\"completed\"");
    (void)!std::system(("rm -rf '" + dir + "'").c_str());
  }
}

TEST(ProcessGroup, HungRankTimesOutNamingThePeer) {
  const int size = 2;
  auto t0 = std::chrono::steady_clock::now();
  auto res = run_processes(
      size,
      [&](int rank, const std::string& path) {
        ProcessGroupOptions o;
        o.timeout = std::chrono::milliseconds(1500);
        auto pg = make_group(rank, size, path, o);
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::seconds(4));
          return;
        }
        Tensor t = full({16}, Scalar(1.0), TensorOptions(kFloat32));
        std::string err = loom::testing::error_of<DistError>([&] { pg->allreduce(t); });
        CHILD_CHECK(
            err.find("timed out") != std::string::npos && err.find("rank 1") != std::string::npos,
            err);
      },
      30);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_ok(res);
  EXPECT_LT(secs, 10.0);
}

TEST(ProcessGroup, AbortUnblocksAWaitingCollective) {
  const int size = 2;
  auto res = run_processes(size, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, size, path);
    if (rank == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      return;
    }
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      pg->abort();
    });
    Tensor t = full({16}, Scalar(1.0), TensorOptions(kFloat32));
    auto t0 = std::chrono::steady_clock::now();
    std::string err = loom::testing::error_of<DistError>([&] { pg->allreduce(t); });
    killer.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHILD_CHECK(err.find("aborted") != std::string::npos, err);
    CHILD_CHECK(secs < 1.5, secs);
  });
  expect_ok(res);
}

TEST(ProcessGroup, BadArgumentsAreTypedErrors) {
  auto res = run_processes(2, [&](int rank, const std::string& path) {
    auto pg = make_group(rank, 2, path);
    Tensor i = full({4}, Scalar(int64_t{1}), TensorOptions(kInt64));
    std::string e1 = loom::testing::error_of<TypeError>([&] { pg->allreduce(i, ReduceOp::Avg); });
    CHILD_CHECK(e1.find("AVG needs a floating dtype") != std::string::npos, e1);
    std::string e2 = loom::testing::error_of<ValueError>([&] { pg->broadcast(i, 5); });
    CHILD_CHECK(e2.find("root 5 is not a rank") != std::string::npos, e2);
    Tensor out = empty({7}, TensorOptions(kInt64));
    std::string e3 =
        loom::testing::error_of<ValueError>([&] { pg->allgather_into_tensor(out, i); });
    CHILD_CHECK(e3.find("output has 7 elements but 2 ranks x 4") != std::string::npos, e3);
    Tensor f = empty({8}, TensorOptions(kFloat32));
    std::string e4 = loom::testing::error_of<TypeError>([&] { pg->allgather_into_tensor(f, i); });
    CHILD_CHECK(e4.find("float32 but the input is int64") != std::string::npos, e4);
    pg->barrier();
  });
  expect_ok(res);
}

}  // namespace
}  // namespace loom::dist
