// ProcessGroup: ordering, execution (inline or on the worker), contract checks, the flight recorder
// and failure handling. The collectives themselves are in collectives.cpp.
#include "distributed/group/process_group_impl.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <iostream>
#include <thread>

#include "distributed/settings.h"
#include "distributed/group/signal_abort.h"
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

int env_flag_detail() { return settings::kDebug.get() == "detail" ? 1 : 0; }

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
    : root_store(std::move(root)), rank(rank_), size(size_), name(o.name), name_hash(hash_string(name)),
      opts(std::move(o)), flight(static_cast<size_t>(opts.flight_entries)) {}

ProcessGroup::Impl::~Impl() {
  stop_signals::remove_group(this);
  {
    std::lock_guard<std::mutex> g(q_mu);
    stopping = true;
  }
  q_cv.notify_all();
  if (worker.joinable()) worker.join();
  if (comm) comm->close_all();
}

std::shared_ptr<ProcessGroup> ProcessGroup::create(std::shared_ptr<Store> store, int rank, int size,
                                                   ProcessGroupOptions options) {
  LOOM_CHECK(store != nullptr, "[dist] ProcessGroup::create: no store");
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size, "[dist] ProcessGroup::create: rank ", rank,
             " is not in [0, ", size, ")");
  if (settings::kFlightEntries.is_set()) options.flight_entries = static_cast<int>(settings::kFlightEntries.get());
  // Note [Stop signals]: SIGTERM/SIGINT abort the group, write its flight record and end the process.
  stop_signals::install();
  auto impl = std::make_unique<Impl>(store, rank, size, options);
  impl->store = std::make_shared<PrefixStore>("pg/" + impl->name, store);
  impl->store->set_timeout(options.timeout);
  impl->detail = options.debug_detail >= 0 ? options.debug_detail == 1 : env_flag_detail() == 1;
  std::string algo = options.algo;
  if (algo.empty()) {
    algo = settings::kAlgo.get();
  }
  impl->algo = parse_algo(algo);
  TransportOptions to = transport_options_from_env();
  if (!options.transport.empty()) to.transport = options.transport;
  if (options.tcp_channels > 0) to.tcp_channels = options.tcp_channels;
  to.deadline = Clock::now() + options.timeout;
  int local_ranks = 1;
  auto links = connect_links(*impl->store, rank, size, to, &impl->transport_desc, &local_ranks);
  impl->comm = std::make_unique<Comm>(rank, size, std::move(links));
  // Oversubscribed when the host's ranks outnumber the cores this process may run on.
  cpu_set_t cpus;
  int cores = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  impl->comm->set_oversubscribed(local_ranks > cores);
  if (local_ranks > cores) {
    impl->transport_desc += " (" + std::to_string(local_ranks) + " ranks on " + std::to_string(cores) +
                            " cores: waits yield)";
  }
  impl->comm->set_failure_probe(&probe_root_cause, impl.get());
  if (impl->detail && rank == 0) {
    std::fprintf(stderr,
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

ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::size() const { return impl_->size; }
const std::string& ProcessGroup::name() const { return impl_->name; }

uint64_t ProcessGroup::sequence_number() const {
  std::lock_guard<std::mutex> g(impl_->submit_mu);
  return impl_->next_seq;
}

std::string ProcessGroup::describe() const {
  std::lock_guard<std::mutex> g(impl_->exec_mu);
  std::string s = "group '" + impl_->name + "' rank " + std::to_string(impl_->rank) + "/" +
                  std::to_string(impl_->size) + ": " + impl_->transport_desc;
  const Comm* c = impl_->comm.get();
  if (c->doorbell_sleeps() > 0) {
    s += detail::str_cat("; waits slept ", c->doorbell_sleeps(), " times on the doorbell (",
                         c->doorbell_timeouts(), " unwoken)");
  }
  if (c->bytes_helped() > 0) {
    s += detail::str_cat("; copied ", c->bytes_helped(), " bytes into peers' receives while waiting");
  }
  if (impl_->last_algo != Algo::Auto) {
    std::string why;
    choose_allreduce(impl_->last_algo_bytes, impl_->size, impl_->algo, &why);
    s += "; last allreduce: " + std::string(algo_name(impl_->last_algo)) + " for " +
         std::to_string(impl_->last_algo_bytes) + " bytes (" + why + ")";
  }
  return s;
}

void ProcessGroup::abort() { impl_->abort_with({}); }

void ProcessGroup::abort(const std::string& reason) {
  impl_->abort_with(reason.empty() ? std::string() : "aborted: " + reason);
}

bool ProcessGroup::Impl::abort_with(const std::string& reason) {
  comm->request_abort(reason);
  // Close the links now unless a collective is running: that one sees the flag, fails and closes.
  bool idle = false;
  if (exec_mu.try_lock()) {
    idle = true;
    broken = true;
    if (broken_reason.empty()) broken_reason = reason.empty() ? "abort() was called" : reason;
    comm->close_all();
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
      execute(w->fp, w->p2p, w->ticket, Clock::now(), BodyRef(w->body));
      w->finish(nullptr);
    } catch (...) {
      w->finish(std::current_exception());
    }
    w->body = nullptr;  // the tensors it holds are the caller's again
    worker_pending.fetch_sub(1, std::memory_order_release);
  }
}

ProcessGroup::Impl::Submission ProcessGroup::Impl::begin(const Fingerprint& fp, bool p2p, bool async) {
  if (comm->closed()) {
    std::lock_guard<std::mutex> g(exec_mu);
    throw DistError(detail::str_cat("[dist] ", dist::describe(fp), " in group '", name, "': ",
                                    broken ? "the group failed earlier: " + broken_reason
                                           : comm->abort_reason()));
  }
  Submission s;
  s.fp = fp;
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
  auto w = std::make_shared<WorkImpl>(s.fp, s.p2p, s.ticket, std::move(body));
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

void ProcessGroup::Impl::execute(const Fingerprint& fp, bool p2p, uint64_t ticket,
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
    throw DistError(detail::str_cat("[dist] ", what_of(&ctx), ": the group failed earlier: ", broken_reason));
  }
  comm->reset();
  comm->set_context(+what_of, &ctx, start + opts.timeout);
  flight.started(ticket, flight.wall_us(start));
  // The profiler's collective event: times the transfer on the thread that runs it (async ones too).
  std::optional<RecordFunctionGuard> profiler_scope;
  if (LOOM_UNLIKELY(record_function_active())) {
    const bool sized = fp.dtype >= 0 && fp.kind != static_cast<uint8_t>(CollKind::Alltoall);
    profiler_scope.emplace(OpEvent::Kind::Collective,
                           std::string("dist::") + coll_name(static_cast<CollKind>(fp.kind)),
                           sized ? static_cast<int64_t>(fp.count * element_size(static_cast<DType>(fp.dtype))) : -1);
  }
  bool contract_error = false;
  try {
    if (detail && !p2p && size > 1) {
      std::vector<Fingerprint> all(static_cast<size_t>(size));
      auto exchange = [&] {
        all[static_cast<size_t>(rank)] = fp;
        allgather_ring(*comm, all.data(), std::vector<size_t>(static_cast<size_t>(size), sizeof(Fingerprint)));
        comm->wait_all();
        comm->reset();
      };
      exchange();
      std::string msg = contract_mismatch(name, all);
      if (!msg.empty()) {
        contract_error = true;
        throw DistError(msg);
      }
      // Every rank repeats the exchange of collectives 1..kDetailSample once, to time what the
      // check costs (Note on note_detail_cost).
      if (fp.seq >= 1 && fp.seq <= static_cast<uint64_t>(kDetailSample)) {
        const auto t0 = Clock::now();
        exchange();
        note_detail_cost(Clock::now() - t0);
      }
    }
    body(*comm);
    comm->wait_all();
    flight.completed(ticket, flight.now_us());
  } catch (const Error& e) {
    flight.failed(ticket, e.what());
    if (contract_error) throw;
    fail(e.what());
    std::string path = dump_flight(flight_dir());
    if (const int sig = stop_signals::exit_signal()) {  // Note [Stop signals]
      std::fprintf(stderr, "%s [flight record: %s]; exiting by %s\n", e.what(),
                   path.empty() ? "not written" : path.c_str(), stop_signals::signal_name(sig).c_str());
      stop_signals::exit_by(sig);
    }
    if (path.empty()) throw;
    std::string msg = std::string(e.what()) + " [flight record: " + path + "]";
    if (dynamic_cast<const DistError*>(&e) || dynamic_cast<const TimeoutError*>(&e)) throw DistError(msg);
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
  std::fprintf(stderr,
               "[dist] group '%s': the contract check costs about %.1f us per collective (%d ranks, "
               "%s; the fastest of %d timed repeats)\n",
               name.c_str(), std::chrono::duration<double, std::micro>(detail_fastest).count(), size,
               transport_desc.c_str(), kDetailSample);
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
  comm->close_all();
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
