// ProcessGroup: ordering, execution (inline or on the worker), contract checks, the flight recorder
// and failure handling. The collectives themselves are in collectives.cpp.
#include "distributed/group/process_group_impl.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <thread>

#include "distributed/group/signal_abort.h"
#include "distributed/settings.h"
#include "loom/error.h"
#include "loom/record_function.h"

namespace loom::dist {

Work::~Work() = default;

bool WorkImpl::wait(Duration timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (timeout == Duration::max()) {
    cv_.wait(lk, [&] { return done_; });
  } else if (!cv_.wait_for(lk, timeout, [&] { return done_; })) {
    return false;
  }
  if (error_) std::rethrow_exception(error_);
  return true;
}

bool WorkImpl::is_completed() const {
  std::lock_guard<std::mutex> g(mu_);
  return done_;
}

std::exception_ptr WorkImpl::exception() const {
  std::lock_guard<std::mutex> g(mu_);
  return error_;
}

void WorkImpl::finish(std::exception_ptr e) {
  std::lock_guard<std::mutex> g(mu_);
  done_ = true;
  error_ = std::move(e);
  cv_.notify_all();
}

namespace {

int env_flag_detail() {
  return settings::kDebug.get() == "detail" ? 1 : 0;
}

// Reads the group's published root cause without blocking on a store that may be gone.
std::string probe_root_cause(void* arg) {
  auto store = static_cast<ProcessGroup::Impl*>(arg)->store;
  auto p = std::make_shared<std::promise<std::string>>();
  auto fut = p->get_future();
  std::thread([store, p] {
    try {
      p->set_value(store->check({"error"}) ? store->get("error") : std::string());
    } catch (...) {
      p->set_value(std::string());
    }
  }).detach();
  if (fut.wait_for(std::chrono::milliseconds(300)) != std::future_status::ready) return {};
  std::string cause = fut.get();
  return cause.empty() ? cause : "first failure in the group: " + cause;
}

}  // namespace

std::string flight_dir() {
  if (std::string d = settings::kFlightDir.get(); !d.empty()) return d;
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  const std::string run = settings::kRunId.get();
  return base + "/loom-flight-" + (!run.empty() ? run : std::to_string(::getuid()));
}

ProcessGroup::Impl::Impl(std::shared_ptr<Store> root, int rank_, int size_, ProcessGroupOptions o)
    : root_store(std::move(root)),
      rank(rank_),
      size(size_),
      name(o.name),
      name_hash(hash_string(name)),
      opts(std::move(o)),
      flight(static_cast<size_t>(opts.flight_entries)) {}

ProcessGroup::Impl::~Impl() {
  stop_signals::remove_group(this);
  {
    std::lock_guard<std::mutex> g(q_mu);
    stopping = true;
  }
  q_cv.notify_all();
  if (worker.joinable()) worker.join();
  each_backend([](Backend& b) { b.close(); });
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(std::shared_ptr<Store> store, int rank, int size,
                                                   ProcessGroupOptions options) {
  LOOM_CHECK(store != nullptr, "[dist] ProcessGroup::create: no store");
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, "[dist] ProcessGroup::create: rank ", rank,
             " is not in [0, ", size, ")");
  if (settings::kFlightEntries.is_set())
    options.flight_entries = static_cast<int>(settings::kFlightEntries.get());
  // Note [Stop signals]: SIGTERM/SIGINT abort the group, write its flight record and end the
  // process.
  stop_signals::install();
  auto impl = std::make_unique<Impl>(store, rank, size, options);
  impl->store = std::make_shared<PrefixStore>("pg/" + impl->name, store);
  impl->store->set_timeout(options.timeout);
  impl->detail = options.debug_detail >= 0 ? options.debug_detail == 1 : env_flag_detail() == 1;
  BackendContext& ctx = impl->backend_context;
  ctx.store = impl->store;
  ctx.rank = rank;
  ctx.size = size;
  ctx.group = impl->name;
  ctx.options = options;
  ctx.failure_probe = &probe_root_cause;
  ctx.failure_probe_arg = impl.get();
  // The CPU backend connects the ranks now (a collective over all of them): it carries CPU tensors
  // and the group's own control messages (contract fingerprints) whatever the tensors' device.
  const BackendFactory make_cpu = backend_factory(DeviceType::CPU);
  LOOM_INTERNAL_ASSERT(make_cpu != nullptr, "no CPU backend registered");
  auto cpu = make_cpu(ctx);
  impl->cpu = cpu.get();
  impl->cpu_summary = cpu->describe();
  impl->owned[static_cast<int>(DeviceType::CPU)] = std::move(cpu);
  impl->backends[static_cast<int>(DeviceType::CPU)].store(impl->cpu, std::memory_order_release);
  if (impl->detail && rank == 0) {
    std::fprintf(
        stderr,
        "[dist] group '%s': contract checks are on (%s): every collective first exchanges "
        "its %zu-byte fingerprint with all ranks (one extra small allgather per "
        "collective); its cost is measured on collectives 1-%d\n",
        impl->name.c_str(),
        options.debug_detail == 1 ? "ProcessGroupOptions::debug_detail" : "LOOM_DIST_DEBUG=detail",
        sizeof(Fingerprint), Impl::kDetailSample);
  }
  stop_signals::add_group(impl.get());
  return std::shared_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

// Note [Backend per device type]
// The façade (this file and collectives.cpp) owns what every backend shares: argument checks,
// sequence numbers, call order, the contract check, the flight recorder, the profiler's event and
// failure handling. A backend (backend.h) only moves data. Each call picks one by its tensors'
// device type: backends[type] is one atomic load on the way in, so the CPU path pays a load and a
// virtual call, nothing more. Backends other than the CPU one are made at the first call that
// needs them, from the factory registered for the type (a stub that throws NotImplementedError for
// CUDA in this build): the call then fails before it takes a sequence number, so the ranks' counts
// stay in step. A made backend lives as long as the group; abort() and failures reach all of them.
Backend& ProcessGroup::Impl::make_backend(const char* op, const Tensor& t, const char* what) {
  const DeviceType type = t.device().type();
  std::lock_guard<std::mutex> g(backends_mu);
  const int i = static_cast<int>(type);
  if (Backend* b = backends[i].load(std::memory_order_acquire)) return *b;
  const BackendFactory factory = backend_factory(type);
  LOOM_CHECK_AS(NotImplementedError, factory != nullptr, "[dist] ", op, ": ", what, " is on ",
                t.device().str(), "; no process-group backend takes ", device_type_name(type),
                " tensors");
  std::unique_ptr<Backend> made;
  try {
    made = factory(backend_context);
  } catch (const NotImplementedError& e) {
    // Name the call and the tensor that asked for it ("[dist] allreduce: tensor is on cuda:0;
    // ...").
    std::string why = e.what();
    if (why.rfind("[dist] ", 0) == 0) why.erase(0, 7);
    LOOM_THROW(NotImplementedError, "[dist] ", op, ": ", what, " is on ", t.device().str(), "; ",
               why);
  }
  LOOM_INTERNAL_ASSERT(made != nullptr && made->supports(type), "the backend made for ",
                       device_type_name(type), " tensors does not take them");
  owned[i] = std::move(made);
  backends[i].store(owned[i].get(), std::memory_order_release);
  return *owned[i];
}

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const {
  return impl_->rank;
}
int ProcessGroup::size() const {
  return impl_->size;
}
const std::string& ProcessGroup::name() const {
  return impl_->name;
}

uint64_t ProcessGroup::sequence_number() const {
  std::lock_guard<std::mutex> g(impl_->submit_mu);
  return impl_->next_seq;
}

// "group 'world' rank 0/2 (backend cpu): shm x1; last allreduce: ..." and, for every other backend
// made so far, "; backend nccl: ...".
std::string ProcessGroup::describe() const {
  std::lock_guard<std::mutex> g(impl_->exec_mu);
  std::string s = "group '" + impl_->name + "' rank " + std::to_string(impl_->rank) + "/" +
                  std::to_string(impl_->size) + " (backend " + impl_->cpu->name() +
                  "): " + impl_->cpu->describe();
  impl_->each_backend([&](Backend& b) {
    if (&b != impl_->cpu) s += std::string("; backend ") + b.name() + ": " + b.describe();
  });
  return s;
}

void ProcessGroup::abort() {
  impl_->abort_with({});
}

void ProcessGroup::abort(const std::string& reason) {
  impl_->abort_with(reason.empty() ? std::string() : "aborted: " + reason);
}

bool ProcessGroup::Impl::abort_with(const std::string& reason) {
  each_backend([&](Backend& b) { b.request_abort(reason); });
  // Close the links now unless a collective is running: that one sees the flag, fails and closes.
  bool idle = false;
  if (exec_mu.try_lock()) {
    idle = true;
    broken = true;
    if (broken_reason.empty()) broken_reason = reason.empty() ? "abort() was called" : reason;
    each_backend([](Backend& b) { b.close(); });
    exec_mu.unlock();
  }
  std::lock_guard<std::mutex> g(q_mu);
  stopping = true;
  q_cv.notify_all();
  return idle;
}

std::string ProcessGroup::flight_record_json() const {
  return impl_->flight.json(impl_->name, impl_->rank, impl_->size);
}

std::string ProcessGroup::dump_flight_record(const std::string& dir) const {
  return impl_->dump_flight(dir);
}

// ---- execution ----

void ProcessGroup::Impl::worker_loop() {
  for (;;) {
    std::shared_ptr<WorkImpl> w;
    {
      std::unique_lock<std::mutex> lk(q_mu);
      q_cv.wait(lk, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      w = queue.front();
      queue.pop_front();
    }
    try {
      std::lock_guard<std::mutex> g(exec_mu);
      execute(w->fp, *w->backend, w->p2p, w->ticket, Clock::now(), BodyRef(w->body));
      w->finish(nullptr);
    } catch (...) {
      w->finish(std::current_exception());
    }
    w->body = nullptr;  // the tensors it holds are the caller's again
    worker_pending.fetch_sub(1, std::memory_order_release);
  }
}

ProcessGroup::Impl::Submission ProcessGroup::Impl::begin(const Fingerprint& fp, Backend& backend,
                                                         bool p2p, bool async) {
  if (backend.closed()) {
    std::lock_guard<std::mutex> g(exec_mu);
    LOOM_THROW(DistError, "[dist] ", dist::describe(fp), " in group '", name, "': ",
               broken ? "the group failed earlier: " + broken_reason : backend.abort_reason());
  }
  Submission s;
  s.fp = fp;
  s.backend = &backend;
  s.p2p = p2p;
  std::unique_lock<std::mutex> sl(submit_mu);
  s.fp.seq = p2p ? p2p_seq++ : next_seq++;
  s.when = Clock::now();
  s.ticket = flight.scheduled(s.fp, flight.wall_us(s.when));
  // Synchronous and nothing queued before it: run here, without a thread handoff. exec_mu is taken
  // before submit_mu is let go, so no later call can run first.
  s.here = !async && worker_pending.load(std::memory_order_acquire) == 0;
  if (s.here) {
    s.lock = std::unique_lock<std::mutex>(exec_mu);
  } else {
    s.lock = std::move(sl);
  }
  return s;
}

std::shared_ptr<Work> ProcessGroup::Impl::enqueue(Submission& s, CollectiveBody body, bool async) {
  auto w = std::make_shared<WorkImpl>(s.fp, s.p2p, s.ticket, s.backend, std::move(body));
  {
    std::lock_guard<std::mutex> g(q_mu);
    queue.push_back(w);
    worker_pending.fetch_add(1, std::memory_order_relaxed);
    if (!worker.joinable()) worker = std::thread([this] { worker_loop(); });
  }
  q_cv.notify_all();
  s.lock.unlock();  // submit_mu: queued in call order
  if (!async) w->wait();
  return w;
}

void ProcessGroup::Impl::execute(const Fingerprint& fp, Backend& backend, bool p2p, uint64_t ticket,
                                 Clock::time_point start, BodyRef body) {
  struct Ctx {
    const Fingerprint* fp;
    const std::string* group;
  } ctx{&fp, &name};
  auto what_of = [](const void* a) {
    auto* c = static_cast<const Ctx*>(a);
    return detail::str_cat(dist::describe(*c->fp), " #", c->fp->seq, " in group '", *c->group, "'");
  };
  if (broken) {
    flight.failed(ticket, "group already failed");
    LOOM_THROW(DistError, "[dist] ", what_of(&ctx), ": the group failed earlier: ", broken_reason);
  }
  const Clock::time_point deadline = start + opts.timeout;
  backend.begin_call(+what_of, &ctx, deadline);
  flight.started(ticket, flight.wall_us(start), "", backend.name());
  // The profiler's collective event: times the transfer on the thread that runs it (async ones
  // too).
  std::optional<RecordFunctionGuard> profiler_scope;
  if (LOOM_UNLIKELY(record_function_active())) {
    const bool sized = fp.dtype >= 0 && fp.kind != static_cast<uint8_t>(CollKind::Alltoall);
    profiler_scope.emplace(
        OpEvent::Kind::Collective,
        std::string("dist::") + coll_name(static_cast<CollKind>(fp.kind)),
        sized ? static_cast<int64_t>(fp.count * element_size(static_cast<DType>(fp.dtype))) : -1);
  }
  bool contract_error = false;
  try {
    if (detail && !p2p && size > 1) {
      // Fingerprints travel over the CPU backend whatever the call's backend (host memory).
      if (&backend != cpu) cpu->begin_call(+what_of, &ctx, deadline);
      std::vector<Fingerprint> all(static_cast<size_t>(size));
      auto exchange = [&] {
        all[static_cast<size_t>(rank)] = fp;
        cpu->allgather_records(all.data(), sizeof(Fingerprint));
      };
      exchange();
      std::string msg = contract_mismatch(name, all);
      contract_error = !msg.empty();
      LOOM_CHECK_AS(DistError, msg.empty(), msg);
      // Every rank repeats the exchange of collectives 1..kDetailSample once, to time what the
      // check costs (Note on note_detail_cost).
      if (fp.seq >= 1 && fp.seq <= static_cast<uint64_t>(kDetailSample)) {
        const auto t0 = Clock::now();
        exchange();
        note_detail_cost(Clock::now() - t0);
      }
    }
    body(backend);
    backend.end_call();
    flight.completed(ticket, flight.now_us(), backend.algorithm_used());
  } catch (const Error& e) {
    flight.failed(ticket, e.what());
    if (contract_error) throw;
    fail(e.what());
    std::string path = dump_flight(flight_dir());
    if (const int sig = stop_signals::exit_signal()) {  // Note [Stop signals]
      std::fprintf(stderr, "%s [flight record: %s]; exiting by %s\n", e.what(),
                   path.empty() ? "not written" : path.c_str(),
                   stop_signals::signal_name(sig).c_str());
      stop_signals::exit_by(sig);
    }
    if (path.empty()) throw;
    std::string msg = std::string(e.what()) + " [flight record: " + path + "]";
    LOOM_CHECK_AS(DistError,
                  !dynamic_cast<const DistError*>(&e) && !dynamic_cast<const TimeoutError*>(&e),
                  msg);
    throw;
  }
}

// What LOOM_DIST_DEBUG=detail adds per collective on this machine and transport: the fastest of
// the exchanges that collectives 1..kDetailSample repeat right after their check, when the ranks
// are in step. (Timing the check itself would count the wait for the slowest rank to arrive, which
// the collective would wait for anyway: milliseconds in a benchmark whose ranks arrive apart.)
// Rank 0 reports it once.
void ProcessGroup::Impl::note_detail_cost(Clock::duration d) {
  detail_fastest = detail_sampled++ == 0 ? d : std::min(detail_fastest, d);
  if (detail_sampled != kDetailSample || rank != 0) return;
  std::fprintf(
      stderr,
      "[dist] group '%s': the contract check costs about %.1f us per collective (%d ranks, "
      "%s; the fastest of %d timed repeats)\n",
      name.c_str(), std::chrono::duration<double, std::micro>(detail_fastest).count(), size,
      cpu_summary.c_str(), kDetailSample);
}

void ProcessGroup::Impl::fail(const std::string& why) {
  broken = true;
  broken_reason = why;
  // Publish the first failure so that ranks that only see a closed link can name the cause.
  auto s = store;
  std::string msg = detail::str_cat("rank ", rank, ": ", why);
  auto done = std::make_shared<std::promise<void>>();
  auto fut = done->get_future();
  std::thread([s, msg, done] {
    try {
      s->compare_set("error", "", msg);
    } catch (...) {
    }
    done->set_value();
  }).detach();
  fut.wait_for(std::chrono::milliseconds(300));
  each_backend([](Backend& b) { b.close(); });
}

std::string ProcessGroup::Impl::dump_flight(const std::string& dir) const {
  try {
    ::mkdir(dir.c_str(), 0755);
    std::string safe = name;
    for (char& c : safe) {
      if (c == '/' || c == ' ') c = '_';
    }
    std::string path = dir + "/flight-" + safe + "-rank" + std::to_string(rank) + ".json";
    std::ofstream f(path, std::ios::trunc);
    f << flight.json(name, rank, size);
    return f ? path : std::string();
  } catch (...) {
    return {};
  }
}

}  // namespace loom::dist
