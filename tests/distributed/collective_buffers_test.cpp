// How the collectives of src/distributed/group/collectives.cpp hand user buffers to the algorithms,
// across real processes. reduce_scatter(_tensor): input and output used in place (contiguous,
// working dtype), bf16 accumulated in f32 (input converted, output staged), AVG, a non-contiguous
// output, an output that is a view of the input, and a list of inputs of which only some need
// packing. allgather: sent from the input, from the output's own block (in place), and from an
// input overlapping another block. Blocks are large enough to go by address over shared memory
// (process_vm_readv) and to span several pieces.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "distributed/multiprocess.h"
#include "distributed/reduce_reference.h"
#include "loom/ops.h"

namespace loom::dist {
namespace {

using loom::testing::make_group;
using loom::testing::run_processes;

// Small integers: sums over a few ranks are exact in f32 and bf16's f32 accumulation.
float value(int rank, int64_t i) {
  return static_cast<float>((i * 7 + rank * 3) % 17) - 8.0f;
}

Tensor rank_input(int rank, int64_t n, DType dt) {
  Tensor t = empty({n}, TensorOptions(kFloat32));
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = value(rank, i);
  return dt == kFloat32 ? t : t.to(dt);
}

double want(ReduceOp op, int size, int64_t i) {
  double acc = 0, mx = -1e300;
  for (int r = 0; r < size; ++r) {
    acc += value(r, i);
    mx = std::max(mx, static_cast<double>(value(r, i)));
  }
  return op == ReduceOp::Max ? mx : op == ReduceOp::Avg ? acc / size : acc;
}

// out holds elements first.. of the reduction.
void check(const Tensor& out, ReduceOp op, int size, int64_t first, double tol,
           const std::string& what) {
  Tensor f = out.to(kFloat64).contiguous();
  const double* p = f.data_ptr<double>();
  for (int64_t k = 0; k < f.numel(); ++k) {
    double w = want(op, size, first + k);
    CHILD_CHECK(std::fabs(p[k] - w) <= tol,
                what << ": element " << k << " is " << p[k] << ", expected " << w);
  }
}

class CollectiveBuffers : public ::testing::TestWithParam<std::string> {};

TEST_P(CollectiveBuffers, ReduceScatter) {
  const std::string transport = GetParam();
  for (int size : {2, 3, 4}) {
    auto res = run_processes(size, [&](int rank, const std::string& path) {
      // Pieces of 64 KiB, each sent by address: several pieces per block, and on 4 ranks the
      // scratch regions of the ring's partial sums are reused while peers read them.
      loom::testing::ChunkBytes chunk(64 << 10);
      ::setenv("LOOM_SHM_CMA_MIN", "4096", 1);
      ProcessGroupOptions o;
      o.transport = transport;
      auto pg = make_group(rank, size, path, o);
      for (int64_t n : {int64_t{0}, int64_t{5}, int64_t{100005}}) {
        const int64_t first = rank * n;
        const std::string at = " n=" + std::to_string(n);
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
          const std::string name = std::string(reduce_op_name(op)) + at;
          // In place on both sides; the input must be left as it was.
          Tensor in = rank_input(rank, size * n, kFloat32),
                 out = empty({n}, TensorOptions(kFloat32));
          pg->reduce_scatter_tensor(out, in, op);
          check(out, op, size, first, 1e-6, "f32 " + name);
          for (int64_t i = 0; i < in.numel(); ++i) {
            CHILD_CHECK(in.data_ptr<float>()[i] == value(rank, i), "input changed at " << i);
          }
          // bf16: converted input, staged output.
          Tensor hin = rank_input(rank, size * n, kBFloat16),
                 hout = empty({n}, TensorOptions(kBFloat16));
          pg->reduce_scatter_tensor(hout, hin, op);
          check(hout, op, size, first, op == ReduceOp::Avg ? 0.05 : 0, "bf16 " + name);
        }
        // A non-contiguous output (every other element of a larger tensor).
        Tensor in = rank_input(rank, size * n, kFloat32);
        Tensor wide = zeros({2 * n}, TensorOptions(kFloat32));
        Tensor strided = wide.reshape({n, 2}).select(1, 0);
        pg->reduce_scatter_tensor(strided, in, ReduceOp::Sum);
        check(strided, ReduceOp::Sum, size, first, 0, "strided output" + at);
        // The output is this rank's block of the input (the in-place form).
        Tensor both = rank_input(rank, size * n, kFloat32);
        Tensor mine = both.narrow(0, first, n);
        pg->reduce_scatter_tensor(mine, both, ReduceOp::Sum);
        check(mine, ReduceOp::Sum, size, first, 0, "output inside the input" + at);
        // A list of inputs: block 1 is a transposed view (packed), the others are used in place.
        std::vector<Tensor> ins;
        for (int r = 0; r < size; ++r) {
          Tensor full_in = rank_input(rank, size * n, kFloat32).narrow(0, r * n, n).contiguous();
          if (r == 1 && n % 5 == 0 && n > 0)
            full_in = full_in.reshape({5, n / 5}).t().contiguous().t();
          ins.push_back(full_in);
        }
        Tensor lout = empty({n}, TensorOptions(kFloat32));
        pg->reduce_scatter(lout, ins, ReduceOp::Sum);
        check(lout, ReduceOp::Sum, size, first, 0, "list" + at);
      }
    });
    EXPECT_ALL_RANKS_OK(res);
  }
}

TEST_P(CollectiveBuffers, AllgatherIntoTensor) {
  const std::string transport = GetParam();
  for (int size : {2, 3}) {
    auto res = run_processes(size, [&](int rank, const std::string& path) {
      loom::testing::ChunkBytes chunk(64 << 10);
      ::setenv("LOOM_SHM_CMA_MIN", "4096", 1);
      ProcessGroupOptions o;
      o.transport = transport;
      auto pg = make_group(rank, size, path, o);
      for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{100005}}) {
        const std::string at = " n=" + std::to_string(n);
        auto check_all = [&](const Tensor& out, const std::string& what) {
          const float* p = out.data_ptr<float>();
          for (int64_t i = 0; i < size * n; ++i) {
            CHILD_CHECK(p[i] == value(static_cast<int>(i / n), i % n),
                        what << at << ": element " << i);
          }
        };
        Tensor in = rank_input(rank, n, kFloat32), out = empty({size * n}, TensorOptions(kFloat32));
        pg->allgather_into_tensor(out, in);
        check_all(out, "separate input");
        for (int64_t i = 0; i < n; ++i)
          CHILD_CHECK(in.data_ptr<float>()[i] == value(rank, i), "input changed");
        // In place: the input is this rank's block of the output.
        Tensor both = empty({size * n}, TensorOptions(kFloat32));
        Tensor mine = both.narrow(0, rank * n, n);
        mine.copy_(rank_input(rank, n, kFloat32));
        pg->allgather_into_tensor(both, mine);
        check_all(both, "in place");
        // The input is another rank's block of the output: it must be read before it is
        // overwritten.
        Tensor other = empty({size * n}, TensorOptions(kFloat32));
        Tensor theirs = other.narrow(0, ((rank + 1) % size) * n, n);
        theirs.copy_(rank_input(rank, n, kFloat32));
        pg->allgather_into_tensor(other, theirs);
        check_all(other, "input inside another block");
      }
    });
    EXPECT_ALL_RANKS_OK(res);
  }
}

INSTANTIATE_TEST_SUITE_P(Dist, CollectiveBuffers, ::testing::Values("shm", "tcp"));

}  // namespace
}  // namespace loom::dist
