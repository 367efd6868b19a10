// rendezvous(): torchrun / Slurm / OpenMPI environments, tcp:// and file://, bad values, a rank
// used twice and ranks that never come.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "distributed/store_test_util.h"
#include "loom/distributed/rendezvous.h"
#include "loom/error.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::error_of;
using namespace std::chrono_literals;

constexpr const char* kLauncherVars[] = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "SLURM_PROCID",
                                         "SLURM_NTASKS",
                                         "SLURM_LOCALID",
                                         "SLURM_NTASKS_PER_NODE",
                                         "SLURM_TASKS_PER_NODE",
                                         "OMPI_COMM_WORLD_RANK",
                                         "OMPI_COMM_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_RANK",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE",
                                         "LOOM_STORE_TOKEN"};

// Each test starts from an environment without launcher variables.
class StoreRendezvous : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : kLauncherVars) env_.set(v, std::nullopt);
  }
  testing::ScopedEnv env_;
};

void expect_info(const RendezvousInfo& info, int rank, int world, int local_rank, int local_world,
                 const std::string& source) {
  EXPECT_EQ(info.rank, rank);
  EXPECT_EQ(info.world_size, world);
  EXPECT_EQ(info.local_rank, local_rank);
  EXPECT_EQ(info.local_world_size, local_world);
  EXPECT_EQ(info.source, source);
  ASSERT_NE(info.store, nullptr);
}

TEST_F(StoreRendezvous, TorchrunSingleRank) {
  const int port = testing::free_port();
  env_.set("RANK", "0");
  env_.set("WORLD_SIZE", "1");
  env_.set("LOCAL_RANK", "0");
  env_.set("LOCAL_WORLD_SIZE", "1");
  env_.set("MASTER_PORT", std::to_string(port));
  RendezvousInfo info = rendezvous("env://", -1, -1, 2000ms);
  expect_info(info, 0, 1, 0, 1, "torchrun env");
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, port);
  info.store->set("x", "1");
  auto* prefix = dynamic_cast<PrefixStore*>(info.store.get());
  ASSERT_NE(prefix, nullptr);
  EXPECT_EQ(prefix->base()->get("default_pg/x"), "1");
  EXPECT_EQ(prefix->base()->get("rdzv/joined"), "1");
  EXPECT_EQ(info.store->timeout(), Duration(2000));
}

TEST_F(StoreRendezvous, TorchrunTwoProcesses) {
  const int port = testing::free_port();
  env_.set("WORLD_SIZE", "2");
  env_.set("LOCAL_WORLD_SIZE", "2");
  env_.set("MASTER_ADDR", "127.0.0.1");
  env_.set("MASTER_PORT", std::to_string(port));
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int rc = 0;
    try {
      ::setenv("RANK", "1", 1);
      ::setenv("LOCAL_RANK", "1", 1);
      RendezvousInfo info = rendezvous("env://", -1, -1, 5000ms);
      if (info.rank != 1 || info.world_size != 2 || info.local_rank != 1 ||
          info.local_world_size != 2 || info.source != "torchrun env") {
        rc = 3;
      }
      info.store->set("hello/1", "from rank 1");
      if (info.store->get("hello/0") != "from rank 0") rc = 4;
      info.store->add("done", 1);
    } catch (...) {
      rc = 2;
    }
    ::_exit(rc);
  }
  env_.set("RANK", "0");
  env_.set("LOCAL_RANK", "0");
  RendezvousInfo info = rendezvous("env://", -1, -1, 5000ms);
  expect_info(info, 0, 2, 0, 2, "torchrun env");
  info.store->set("hello/0", "from rank 0");
  EXPECT_EQ(info.store->get("hello/1"), "from rank 1");
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);  // rank 0 hosts the server: outlive the child
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(info.store->add("done", 0), 1);
}

TEST_F(StoreRendezvous, SlurmRankJoinsRankZeroGivenByArguments) {
  const int port = testing::free_port();
  env_.set("MASTER_PORT", std::to_string(port));
  env_.set("SLURM_PROCID", "1");
  env_.set("SLURM_NTASKS", "2");
  env_.set("SLURM_LOCALID", "1");
  env_.set("SLURM_TASKS_PER_NODE", "2(x1)");
  auto rank0 = std::async(std::launch::async, [] { return rendezvous("env://", 0, 2, 5000ms); });
  RendezvousInfo info = rendezvous("env://", -1, -1, 5000ms);
  expect_info(info, 1, 2, 1, 2, "slurm");
  RendezvousInfo info0 = rank0.get();
  expect_info(info0, 0, 2, 0, 2, "arguments");
  EXPECT_EQ(info0.master_port, port);

  // SLURM_NTASKS_PER_NODE wins over SLURM_TASKS_PER_NODE.
  env_.set("SLURM_PROCID", "0");
  env_.set("SLURM_NTASKS", "1");
  env_.set("SLURM_LOCALID", "0");
  env_.set("SLURM_NTASKS_PER_NODE", "1");
  env_.set("SLURM_TASKS_PER_NODE", "4(x2)");
  env_.set("MASTER_PORT", std::to_string(testing::free_port()));
  expect_info(rendezvous("env://", -1, -1, 2000ms), 0, 1, 0, 1, "slurm");
}

TEST_F(StoreRendezvous, OpenMpi) {
  env_.set("MASTER_PORT", std::to_string(testing::free_port()));
  env_.set("OMPI_COMM_WORLD_RANK", "0");
  env_.set("OMPI_COMM_WORLD_SIZE", "1");
  env_.set("OMPI_COMM_WORLD_LOCAL_RANK", "0");
  env_.set("OMPI_COMM_WORLD_LOCAL_SIZE", "1");
  expect_info(rendezvous("env://", -1, -1, 2000ms), 0, 1, 0, 1, "openmpi");
}

TEST_F(StoreRendezvous, TcpThreeRanks) {
  const int port = testing::free_port();
  const std::string init = "tcp://127.0.0.1:" + std::to_string(port);
  std::vector<std::future<RendezvousInfo>> ranks;
  for (int r = 2; r >= 0; --r) {  // clients first: they wait for rank 0's server
    ranks.push_back(std::async(std::launch::async, [=] { return rendezvous(init, r, 3, 5000ms); }));
  }
  std::vector<RendezvousInfo> infos;
  for (auto& f : ranks) infos.push_back(f.get());
  for (int i = 0; i < 3; ++i) {
    const RendezvousInfo& info = infos[static_cast<size_t>(i)];
    expect_info(info, 2 - i, 3, 2 - i, 3, init);
    EXPECT_EQ(info.master_addr, "127.0.0.1");
    EXPECT_EQ(info.master_port, port);
  }
  EXPECT_EQ(infos[0].store->add("k", 1) + infos[1].store->add("k", 1) + infos[2].store->add("k", 1),
            6);
}

TEST_F(StoreRendezvous, FileTwoRanksFromEnvironmentWorldSize) {
  testing::TempDir dir;
  const std::string init = "file://" + dir.file("rdzv");
  env_.set("RANK", "0");  // rank overridden below, world size from the environment
  env_.set("WORLD_SIZE", "2");
  auto other = std::async(std::launch::async, [=] { return rendezvous(init, 1, -1, 5000ms); });
  RendezvousInfo info = rendezvous(init, -1, -1, 5000ms);
  RendezvousInfo info1 = other.get();
  expect_info(info, 0, 2, 0, 2, init);
  expect_info(info1, 1, 2, 1, 2, init);
  EXPECT_EQ(info.master_addr, "");
  EXPECT_EQ(info.master_port, 0);
  info.store->set("a", "b");
  EXPECT_EQ(info1.store->get("a"), "b");
}

TEST_F(StoreRendezvous, BadEnvironmentValuesNameTheVariable) {
  auto msg = [](const char* init = "env://") {
    return error_of<ValueError>([&] { rendezvous(init, -1, -1, 500ms); });
  };
  EXPECT_EQ(msg(),
            "[rendezvous] cannot tell this process's rank: RANK/WORLD_SIZE (torchrun), "
            "SLURM_PROCID (srun) and OMPI_COMM_WORLD_RANK (mpirun) are unset; pass rank and "
            "world_size");
  env_.set("RANK", "abc");
  env_.set("WORLD_SIZE", "2");
  EXPECT_EQ(msg(), "[rendezvous] RANK=abc is not an integer");
  env_.set("RANK", "4");
  env_.set("WORLD_SIZE", "4");
  EXPECT_EQ(msg(), "[rendezvous] RANK=4 is out of range for WORLD_SIZE=4 (ranks are 0..3)");
  env_.set("WORLD_SIZE", "0");
  EXPECT_EQ(msg(), "[rendezvous] WORLD_SIZE=0 must be at least 1");
  env_.set("RANK", std::nullopt);
  env_.set("WORLD_SIZE", "2");
  EXPECT_EQ(msg(), "[rendezvous] WORLD_SIZE is set but RANK is not (the launcher sets both)");
  env_.set("RANK", "1");
  env_.set("LOCAL_RANK", "3");
  env_.set("LOCAL_WORLD_SIZE", "2");
  EXPECT_EQ(msg(), "[rendezvous] LOCAL_RANK=3 is out of range for LOCAL_WORLD_SIZE=2");
  env_.set("LOCAL_RANK", "1");
  env_.set("MASTER_PORT", "70000");
  EXPECT_EQ(msg(), "[rendezvous] MASTER_PORT=70000 is out of range 1..65535");
  env_.set("MASTER_PORT", "http");
  EXPECT_EQ(msg(), "[rendezvous] MASTER_PORT=http is not an integer");

  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_PORT"}) {
    env_.set(v, std::nullopt);
  }
  env_.set("SLURM_PROCID", "0");
  EXPECT_EQ(msg(),
            "[rendezvous] SLURM_PROCID is set but SLURM_NTASKS is not (the launcher sets both)");
  env_.set("SLURM_NTASKS", "2");
  env_.set("SLURM_TASKS_PER_NODE", "x2");
  EXPECT_EQ(msg(), "[rendezvous] SLURM_TASKS_PER_NODE=x2 does not start with a task count");
  env_.set("SLURM_TASKS_PER_NODE", "3(x1)");
  EXPECT_EQ(msg(), "[rendezvous] SLURM_TASKS_PER_NODE=3 must be between 1 and SLURM_NTASKS=2");
  env_.set("SLURM_PROCID", std::nullopt);
  env_.set("OMPI_COMM_WORLD_RANK", "-1");
  env_.set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(
      msg(),
      "[rendezvous] OMPI_COMM_WORLD_RANK=-1 is out of range for OMPI_COMM_WORLD_SIZE=2 (ranks "
      "are 0..1)");

  EXPECT_EQ(error_of<ValueError>([] { rendezvous("mpi://x", 0, 1, 500ms); }),
            "[rendezvous] unknown init_method 'mpi://x': expected env://, tcp://host:port or "
            "file:///path");
  EXPECT_EQ(error_of<ValueError>([] { rendezvous("tcp://localhost", 0, 1, 500ms); }),
            "[rendezvous] init_method 'tcp://localhost' needs a host and a port (tcp://host:port)");
  EXPECT_EQ(
      error_of<ValueError>([] { rendezvous("tcp://localhost:0", 0, 1, 500ms); }),
      "[rendezvous] init_method 'tcp://localhost:0': port '0' is not a port number (1..65535)");
  EXPECT_EQ(error_of<ValueError>([] { rendezvous("file://", 0, 1, 500ms); }),
            "[rendezvous] init_method 'file://' needs a path (file:///path)");
  EXPECT_EQ(error_of<ValueError>([] { rendezvous("env://", 2, 2, 500ms); }),
            "[rendezvous] rank=2 is out of range for world_size=2 (ranks are 0..1)");
}

TEST_F(StoreRendezvous, DuplicateRankIsDistError) {
  const std::string init = "tcp://127.0.0.1:" + std::to_string(testing::free_port());
  auto r0 = std::async(std::launch::async, [=] { return rendezvous(init, 0, 2, 3000ms); });
  std::atomic<int> dist_errors{0}, ok{0};
  std::string message;
  std::mutex mu;
  auto join_as_one = [&] {
    try {
      RendezvousInfo info = rendezvous(init, 1, 2, 3000ms);
      ++ok;
    } catch (const DistError& e) {
      ++dist_errors;
      std::lock_guard<std::mutex> lock(mu);
      message = e.what();
    }
  };
  std::thread a(join_as_one), b(join_as_one);
  a.join();
  b.join();
  r0.get();
  EXPECT_EQ(dist_errors.load(), 1);
  EXPECT_EQ(ok.load(), 1);
  EXPECT_CONTAINS(message, "[rendezvous] rank 1 joined twice: rdzv/rank/1 is held by ");
  EXPECT_CONTAINS(message, "(rank=1 via " + init + "; a stale file:// store also causes this)");
}

TEST_F(StoreRendezvous, MissingRanksTimeOutListingThem) {
  const std::string init = "tcp://127.0.0.1:" + std::to_string(testing::free_port());
  auto r1 = std::async(std::launch::async, [=] {
    return error_of<TimeoutError>([&] { rendezvous(init, 1, 4, 300ms); });
  });
  const std::string msg0 = error_of<TimeoutError>([&] { rendezvous(init, 0, 4, 300ms); });
  EXPECT_EQ(msg0,
            "[rendezvous] rank 0 timed out after 0.3 s waiting for ranks 2, 3 (2 of 4 joined via " +
                init + ")");
  // Rank 1 may find rank 0's server already gone once rank 0 gave up; either way it fails in time.
  const std::string msg1 = r1.get();
  EXPECT_TRUE(msg1.find("[rendezvous] rank 1 timed out after 0.3 s waiting for rank") == 0 ||
              msg1.find("[store] ") == 0 ||
              msg1.find("wrong exception type: [store] cannot reach") == 0)
      << msg1;

  // With a file store nothing goes away: both ranks list the same missing ranks.
  testing::TempDir dir;
  const std::string file = "file://" + dir.file("rdzv");
  auto f1 = std::async(std::launch::async, [=] {
    return error_of<TimeoutError>([&] { rendezvous(file, 1, 4, 400ms); });
  });
  std::this_thread::sleep_for(50ms);  // rank 1 registers first and gives up last
  EXPECT_EQ(error_of<TimeoutError>([&] { rendezvous(file, 0, 4, 200ms); }),
            "[rendezvous] rank 0 timed out after 0.2 s waiting for ranks 2, 3 (2 of 4 joined via " +
                file + ")");
  EXPECT_EQ(f1.get(),
            "[rendezvous] rank 1 timed out after 0.4 s waiting for ranks 2, 3 (2 of 4 "
            "joined via " +
                file + ")");
}

}  // namespace
}  // namespace loom::dist
