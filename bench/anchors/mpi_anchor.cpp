// The OpenMPI side of `loom bench collectives`, run by the driver as
//   mpirun --allow-run-as-root --oversubscribe -np N --mca btl self,vader loom-anchor-mpi ...
// MPI_Allreduce (in place), MPI_Allgather, MPI_Reduce_scatter_block, MPI_Bcast in the library's
// default (tuned) algorithm selection, through the sweep of bench/collective_sweep.h. Rank 0 also
// reports the library and the shared-memory BTL's single-copy mechanism (CMA is OpenMPI's best on
// one host). Built when CMake finds MPI (Debian's libopenmpi-dev).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collective_sweep.h"

namespace {

using loom::bench::coll::Op;
namespace coll = loom::bench::coll;

class MpiBackend final : public coll::Backend {
 public:
  MpiBackend(Op op, int np) : op_(op), np_(np) {}
  std::string config() const override { return "default"; }
  void prepare(int64_t count) override {
    buf_.prepare(op_, count, np_);
    count_ = static_cast<int>(buf_.count);
    block_ = static_cast<int>(buf_.block);
  }
  float* in() override { return buf_.in.p; }
  float* out() override {
    return op_ == Op::kAllreduce || op_ == Op::kBroadcast ? buf_.in.p : buf_.out.p;
  }
  void run() override {
    int rc = MPI_SUCCESS;
    switch (op_) {
      case Op::kAllreduce:
        rc = MPI_Allreduce(MPI_IN_PLACE, buf_.in.p, count_, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
      case Op::kAllgather:
        rc = MPI_Allgather(buf_.in.p, block_, MPI_FLOAT, buf_.out.p, block_, MPI_FLOAT,
                           MPI_COMM_WORLD);
        break;
      case Op::kReduceScatter:
        rc = MPI_Reduce_scatter_block(buf_.in.p, buf_.out.p, block_, MPI_FLOAT, MPI_SUM,
                                      MPI_COMM_WORLD);
        break;
      case Op::kBroadcast:
        rc = MPI_Bcast(buf_.in.p, count_, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    }
    if (rc != MPI_SUCCESS) MPI_Abort(MPI_COMM_WORLD, 4);
  }
  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }
  double max_over_ranks(double value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return value;
  }

 private:
  Op op_;
  int np_;
  coll::RankBuffers buf_;
  int count_ = 0, block_ = 0;  // MPI counts are int
};

// The value of an MPI_T control variable by name, as its enum item name when it has one ("" if
// absent).
std::string control_variable(const char* wanted) {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS) return "";
  std::string result;
  int n = 0;
  MPI_T_cvar_get_num(&n);
  for (int i = 0; i < n && result.empty(); ++i) {
    char name[256], desc[1024];
    int name_len = sizeof(name), desc_len = sizeof(desc), verbosity = 0, bind = 0, scope = 0;
    MPI_Datatype type;
    MPI_T_enum enumtype;
    if (MPI_T_cvar_get_info(i, name, &name_len, &verbosity, &type, &enumtype, desc, &desc_len,
                            &bind, &scope) != MPI_SUCCESS ||
        std::strcmp(name, wanted) != 0 || type != MPI_INT) {
      continue;
    }
    MPI_T_cvar_handle handle;
    int count = 0, value = 0;
    if (MPI_T_cvar_handle_alloc(i, nullptr, &handle, &count) != MPI_SUCCESS) continue;
    MPI_T_cvar_read(handle, &value);
    MPI_T_cvar_handle_free(&handle);
    result = std::to_string(value);
    int items = 0;
    char ename[256];
    int ename_len = sizeof(ename);
    if (enumtype != MPI_T_ENUM_NULL &&
        MPI_T_enum_get_info(enumtype, &items, ename, &ename_len) == MPI_SUCCESS) {
      for (int j = 0; j < items; ++j) {
        int v = 0;
        char item[256];
        int item_len = sizeof(item);
        if (MPI_T_enum_get_item(enumtype, j, &v, item, &item_len) == MPI_SUCCESS && v == value)
          result = item;
      }
    }
  }
  MPI_T_finalize();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<std::string> args(argv + 1, argv + argc), rest;
  coll::SweepOptions o;
  o.np = size;
  if (const char* fault = std::getenv("LOOM_BENCH_TEST_FAULT")) o.test_fault = fault;
  std::string err = coll::parse_sweep_args(args, &o, &rest);
  if (err.empty() && !rest.empty()) err = "unknown argument '" + rest[0] + "'";
  if (err.empty() && o.np != size) {
    err = "--np " + std::to_string(o.np) + " but mpirun started " + std::to_string(size) + " ranks";
  }
  if (!err.empty()) {
    if (rank == 0) std::fprintf(stderr, "loom-anchor-mpi: %s\n", err.c_str());
    MPI_Finalize();
    return 2;
  }
  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    v = v.substr(0, v.find_first_of(",\n"));
    std::string cma = control_variable("btl_vader_single_copy_mechanism");
    coll::emit("info " + v + "; btl vader, single copy: " + (cma.empty() ? "unknown" : cma));
  }
  MpiBackend backend(o.op, size);
  int failures = coll::run_sweep(o, rank, {&backend});
  MPI_Finalize();
  return failures > 0 ? 3 : 0;
}
