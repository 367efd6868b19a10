// The process group's backend seam (src/distributed/group/backend.h): the façade checks arguments,
// numbers calls, checks the contract and records flights, then forwards to the backend the tensors'
// device picks. A recording backend registered for Meta tensors shows the forwarding; CUDA tensors
// pick the NCCL slot, a stub in this build; bad LOOM_* settings of the group are typed errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>

#include "distributed/group/backend.h"
#include "distributed/multiprocess.h"
#include "loom/error.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom::dist {
namespace {

using loom::testing::error_of;
using loom::testing::make_group;
using loom::testing::run_processes;

// What the recording backend saw, in this process.
std::mutex g_calls_mu;
std::vector<std::string> g_calls;

void note(const std::string& call) {
  std::lock_guard<std::mutex> g(g_calls_mu);
  g_calls.push_back(call);
}

std::string calls() {
  std::lock_guard<std::mutex> g(g_calls_mu);
  std::string s;
  for (const std::string& c : g_calls) s += (s.empty() ? "" : ",") + c;
  return s;
}

// Takes Meta tensors and records each call (with its arguments) instead of moving data.
class RecordingBackend final : public Backend {
 public:
  RecordingBackend() : Backend("recording") {}
  bool supports(DeviceType t) const override { return t == DeviceType::Meta; }
  std::string describe() const override { return "records calls"; }
  void begin_call(std::string (*)(const void*), const void*, Clock::time_point) override {
    note("begin");
  }
  void end_call() override { note("end"); }
  void broadcast(const Tensor& t, int root) override {
    note("broadcast(" + std::to_string(root) + ")");
  }
  void allreduce(const Tensor& t, ReduceOp op) override {
    note(std::string("allreduce(") + reduce_op_name(op) + "," + std::to_string(t.numel()) + ")");
  }
  void allreduce_coalesced(const std::vector<Tensor>& ts, ReduceOp) override {
    note("allreduce_coalesced(" + std::to_string(ts.size()) + ")");
  }
  void reduce(const Tensor&, int root, ReduceOp) override {
    note("reduce(" + std::to_string(root) + ")");
  }
  void allgather(const std::vector<Tensor>& outs, const Tensor&) override {
    note("allgather(" + std::to_string(outs.size()) + ")");
  }
  void allgather_into_tensor(const Tensor&, const Tensor&) override {
    note("allgather_into_tensor");
  }
  void reduce_scatter(const Tensor&, const std::vector<Tensor>&, ReduceOp) override {
    note("reduce_scatter");
  }
  void reduce_scatter_tensor(const Tensor&, const Tensor&, ReduceOp) override {
    note("reduce_scatter_tensor");
  }
  void alltoallv(const Tensor&, const Tensor&, const std::vector<int64_t>&,
                 const std::vector<int64_t>&) override {
    note("alltoallv");
  }
  void gather(const std::vector<Tensor>&, const Tensor&, int) override { note("gather"); }
  void scatter(const Tensor&, const std::vector<Tensor>&, int) override { note("scatter"); }
  void barrier() override { note("barrier"); }
  void send(const Tensor&, int dst) override { note("send(" + std::to_string(dst) + ")"); }
  void recv(const Tensor&, int src) override { note("recv(" + std::to_string(src) + ")"); }
  void request_abort(const std::string& reason) override {
    note("abort");
    aborted_ = true;
  }
  void close() override {}
  bool closed() const override { return aborted_; }
  std::string abort_reason() const override { return "recording backend aborted"; }

 private:
  std::atomic<bool> aborted_{false};
};

std::unique_ptr<Backend> make_recording(const BackendContext&) {
  note("made");
  return std::make_unique<RecordingBackend>();
}

// Registers the recording backend for Meta tensors for the test's lifetime.
struct RecordingForMeta {
  RecordingForMeta() : previous(register_backend(DeviceType::Meta, &make_recording)) {}
  ~RecordingForMeta() { register_backend(DeviceType::Meta, previous); }
  BackendFactory previous;
};

Tensor meta(int64_t n) {
  return empty({n}, TensorOptions(kFloat32).with_device(kMeta));
}

TEST(BackendSeam, DefaultFactoriesByDeviceType) {
  EXPECT_EQ(backend_factory(DeviceType::CPU), &make_cpu_backend);
  EXPECT_EQ(backend_factory(DeviceType::CUDA), &make_nccl_backend);
  EXPECT_EQ(backend_factory(DeviceType::Meta), nullptr);
}

TEST(BackendSeam, FacadeNumbersChecksAndRecordsWhatTheBackendRuns) {
  RecordingForMeta registered;
  auto res = run_processes(2, [](int rank, const std::string& path) {
    ProcessGroupOptions o;
    o.debug_detail = 1;  // the façade's contract check runs before every collective
    auto pg = make_group(rank, 2, path, o);
    CHILD_CHECK(calls().empty(), calls());  // made at the first Meta call, not with the group
    Tensor t = meta(6);
    pg->allreduce(t, ReduceOp::Max);
    CHILD_CHECK(calls() == "made,begin,allreduce(max,6),end", calls());
    std::vector<Tensor> outs = {meta(6), meta(6)};
    pg->allgather(outs, t);
    pg->broadcast(t, 1, {.async_op = true})->wait();
    CHILD_CHECK(
        calls() == "made,begin,allreduce(max,6),end,begin,allgather(2),end,begin,broadcast(1),end",
        calls());
    CHILD_CHECK(pg->sequence_number() == 3, pg->sequence_number());
    // The façade's argument checks stand before the backend.
    std::vector<Tensor> one = {meta(6)};
    CHILD_CHECK(error_of<ValueError>([&] {
                  pg->allgather(one, t);
                }).find("1 output tensors given") != std::string::npos,
                "allgather with one output");
    Tensor cpu = full({6}, Scalar(1.0), TensorOptions(kFloat32));
    std::vector<Tensor> mixed = {meta(6), cpu};
    const std::string why = error_of<ValueError>([&] { pg->allgather(mixed, t); });
    CHILD_CHECK(why.find("an output is on cpu but input is on meta (backends cpu and recording)") !=
                    std::string::npos,
                why);
    CHILD_CHECK(pg->sequence_number() == 3, pg->sequence_number());
    // A contract mismatch is found by the façade before the backend is called.
    const std::string before = calls();
    const std::string mismatch = error_of<DistError>([&] {
      if (rank == 0) {
        pg->allreduce(t, ReduceOp::Sum);
      } else {
        pg->allreduce(t, ReduceOp::Min);
      }
    });
    CHILD_CHECK(mismatch.find("reduce op (rank 0: sum, rank 1: min)") != std::string::npos,
                mismatch);
    CHILD_CHECK(calls() == before + ",begin", calls());
    // CPU tensors still take the CPU backend of the same group.
    pg->allreduce(cpu);
    CHILD_CHECK(cpu.data_ptr<float>()[5] == 2.0f, cpu.data_ptr<float>()[5]);
    // Observable: the description and the flight record name the backends.
    const std::string d = pg->describe();
    CHILD_CHECK(d.find("(backend cpu): ") != std::string::npos &&
                    d.find("; backend recording: records calls") != std::string::npos,
                d);
    const std::string flight = pg->flight_record_json();
    CHILD_CHECK(flight.find("\"backend\":\"recording\"") != std::string::npos &&
                    flight.find("\"backend\":\"cpu\"") != std::string::npos,
                flight);
    pg->barrier();
  });
  EXPECT_ALL_RANKS_OK(res);
}

TEST(BackendSeam, AbortReachesEveryBackend) {
  RecordingForMeta registered;
  auto res = run_processes(1, [](int rank, const std::string& path) {
    auto pg = make_group(rank, 1, path);
    Tensor t = meta(2);
    pg->allreduce(t);
    pg->abort("test over");
    CHILD_CHECK(calls() == "made,begin,allreduce(sum,2),end,abort", calls());
    const std::string why = error_of<DistError>([&] { pg->allreduce(t); });
    CHILD_CHECK(why.find("the group failed earlier: aborted: test over") != std::string::npos, why);
  });
  EXPECT_ALL_RANKS_OK(res);
}

// A tensor on a CUDA device without memory: enough to pick a backend in a build without CUDA.
Tensor cuda_tensor() {
  Storage s = make_intrusive<StorageImpl>(
      DataPtr(nullptr, nullptr, nullptr, Device(DeviceType::CUDA, 0)), 0, nullptr);
  return make_tensor(std::move(s), kFloat32, {0}, {1});
}

TEST(BackendSeam, CudaTensorsPickTheNcclSlotWhichIsNotInThisBuild) {
  auto res = run_processes(1, [](int rank, const std::string& path) {
    auto pg = make_group(rank, 1, path);
    Tensor t = cuda_tensor();
    CHILD_CHECK(t.device().is_cuda(), t.device().str());
    const std::string why = error_of<NotImplementedError>([&] { pg->allreduce(t); });
    CHILD_CHECK(
        why.find("[dist] allreduce: tensor is on cuda:0; GPU tensors need the NCCL backend, which "
                 "is not available in this build (") != std::string::npos,
        why);
    const std::string send = error_of<NotImplementedError>([&] { pg->broadcast(t, 0); });
    CHILD_CHECK(send.find("not available in this build") != std::string::npos, send);
    // Failed before taking a sequence number; the group still works.
    CHILD_CHECK(pg->sequence_number() == 0, pg->sequence_number());
    Tensor cpu = full({3}, Scalar(2.0), TensorOptions(kFloat32));
    pg->allreduce(cpu);
    CHILD_CHECK(pg->sequence_number() == 1, pg->sequence_number());
  });
  EXPECT_ALL_RANKS_OK(res);
}

TEST(BackendSeam, DeviceTypeWithoutBackendIsNotImplemented) {
  auto res = run_processes(1, [](int rank, const std::string& path) {
    auto pg = make_group(rank, 1, path);
    Tensor t = meta(4);
    const std::string why = error_of<NotImplementedError>([&] { pg->allreduce(t); });
    CHILD_CHECK(
        why == "[dist] allreduce: tensor is on meta; no process-group backend takes meta tensors",
        why);
  });
  EXPECT_ALL_RANKS_OK(res);
}

// ---- settings: every LOOM_* variable of the group goes through the config registry ----

struct BadSetting {
  const char* name;
  const char* value;
};

TEST(BackendSeam, BadDistributedSettingIsATypedErrorNamingIt) {
  for (BadSetting bad :
       {BadSetting{"LOOM_ALGO", "fastest"}, BadSetting{"LOOM_TCP_CHANNELS", "0"},
        BadSetting{"LOOM_TRANSPORT", "carrier-pigeon"}, BadSetting{"LOOM_DIST_DEBUG", "loud"},
        BadSetting{"LOOM_FLIGHT_ENTRIES", "many"}, BadSetting{"LOOM_DIST_TIMEOUT", "-3"}}) {
    SCOPED_TRACE(bad.name);
    auto res = run_processes(1, [bad](int rank, const std::string& path) {
      ::setenv(bad.name, bad.value, 1);
      const std::string why = error_of<ValueError>([&] {
        auto store = std::make_shared<FileStore>(path);
        ProcessGroup::create(store, rank, 1);
      });
      CHILD_CHECK(
          why.find(bad.name) != std::string::npos && why.find(bad.value) != std::string::npos, why);
    });
    EXPECT_ALL_RANKS_OK(res);
  }
}

}  // namespace
}  // namespace loom::dist
