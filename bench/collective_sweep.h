// The measurement loop shared by `loom bench collectives` and its anchors (loom-anchor-gloo,
// loom-anchor-mpi): message sizes, iteration counts, input patterns, the closed-form check and the
// lines each program prints. Header-only and independent of loom, so the anchors build without it.
// One rank process runs one sweep; nothing here is shared between threads. See Note [collective
// sweep].
#pragma once

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom::bench::coll {

// Note [collective sweep]
// Every program measures the same thing the same way, as nccl-tests does:
//  * sizes: powers of two from --sizes MIN to MAX, in bytes of f32. `count` is the element count of
//  the
//    larger buffer (the allgather output, the reduce_scatter input), rounded down to a multiple of
//    the rank count for those two; the per-rank block is count / np.
//  * per size and configuration: with --check, one run on patterned inputs (between barriers),
//    verified on every rank against sums in closed form (check lines); then zero-filled buffers,
//    `warmup` untimed runs, and `repeats` timed blocks of runs, each block after a barrier. A
//    block's time is the slowest rank's (nccl-tests -a 3): a broadcast root or an eager sender may
//    return long before its peers have the data. Time per run is the median over blocks of block
//    time / runs.
//  * runs per block: about `block_ms` worth at the warm-up's pace (the slowest rank's, agreed by
//    all), at least 1 and at most `iters`. Small messages thus get hundreds of runs, so that a
//    barrier's exit skew (a library whose waiting rank sleeps leaves the barrier late) is spread
//    thin, as OSU's benchmarks do with their 1000 small-message iterations; a 64 MiB message or one
//    of Gloo's configurations that stall for tens of milliseconds per call here gets one or two, so
//    a sweep takes seconds, not minutes.
//  * allreduce and broadcast work in place; allgather and reduce_scatter from an input to an output
//    buffer (Gloo's reduce-scatter works in place and leaves the rank's block at the start).
// Output lines (each written with one write(2), so ranks sharing a pipe do not interleave):
//    info TEXT
//    begin CONFIG BYTES RANK   (every rank, as it starts a size: where a rank that hangs or dies
//    was) result CONFIG ALGORITHM BYTES COUNT TIME_US   (rank 0; ALGORITHM: what the library chose)
//    check CONFIG BYTES RANK ok|FAILED [detail] (every rank, with --check)

enum class Op { kAllreduce, kAllgather, kReduceScatter, kBroadcast };

inline const char* op_name(Op op) {
  switch (op) {
    case Op::kAllreduce:
      return "allreduce";
    case Op::kAllgather:
      return "allgather";
    case Op::kReduceScatter:
      return "reduce_scatter";
    case Op::kBroadcast:
      return "broadcast";
  }
  return "?";
}

inline bool parse_op(const std::string& s, Op* op) {
  for (Op o : {Op::kAllreduce, Op::kAllgather, Op::kReduceScatter, Op::kBroadcast}) {
    if (s == op_name(o)) {
      *op = o;
      return true;
    }
  }
  return false;
}

// nccl-tests' bus bandwidth factor: the fraction of the data each rank's link must carry.
inline double busbw_factor(Op op, int np) {
  double n = np;
  switch (op) {
    case Op::kAllreduce:
      return 2 * (n - 1) / n;
    case Op::kAllgather:
    case Op::kReduceScatter:
      return (n - 1) / n;
    case Op::kBroadcast:
      return 1;
  }
  return 1;
}

// "4K", "64M", "1G", "4096" -> bytes; -1 when malformed.
inline int64_t parse_bytes(const std::string& s) {
  if (s.empty()) return -1;
  if (s[0] < '0' || s[0] > '9') return -1;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (end == s.c_str() || v < 0 || errno == ERANGE) return -1;
  std::string unit(end);
  int shift = -1;
  if (unit == "" || unit == "B") shift = 0;
  if (unit == "K" || unit == "KB" || unit == "KiB" || unit == "k") shift = 10;
  if (unit == "M" || unit == "MB" || unit == "MiB") shift = 20;
  if (unit == "G" || unit == "GB" || unit == "GiB") shift = 30;
  if (shift < 0 || v > (INT64_MAX >> shift)) return -1;  // no unit, or more bytes than int64 holds
  return v << shift;
}

// 4096 -> "4K", 67108864 -> "64M".
inline std::string format_bytes(int64_t b) {
  if (b >= (1 << 30) && b % (1 << 30) == 0) return std::to_string(b >> 30) + "G";
  if (b >= (1 << 20) && b % (1 << 20) == 0) return std::to_string(b >> 20) + "M";
  if (b >= (1 << 10) && b % (1 << 10) == 0) return std::to_string(b >> 10) + "K";
  return std::to_string(b);
}

struct SweepOptions {
  Op op = Op::kAllreduce;
  int np = 2;
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = 64 << 20;
  int iters = 1000;  // the most runs per block
  int warmup = 5;
  int repeats = 5;
  int block_ms = 20;  // the length of a block, roughly
  bool check = false;
  // LOOM_BENCH_TEST_FAULT's value (Note [sweep test hook]): loom's driver reads it through the
  // config registry; the anchors, which do not link libloom, with getenv.
  std::string test_fault;
};

// Parses "MIN:MAX" (or one size) into opts; returns an error message or "".
inline std::string parse_sizes(const std::string& s, SweepOptions* opts) {
  auto colon = s.find(':');
  int64_t lo = parse_bytes(s.substr(0, colon));
  int64_t hi = colon == std::string::npos ? lo : parse_bytes(s.substr(colon + 1));
  if (lo < 4 || hi < lo) {
    return "--sizes expects MIN:MAX in bytes with K/M/G suffixes, MIN >= 4 and MAX >= MIN, but got "
           "'" +
           s + "'";
  }
  opts->min_bytes = lo;
  opts->max_bytes = hi;
  return "";
}

inline std::vector<int64_t> sweep_sizes(const SweepOptions& o) {
  std::vector<int64_t> v;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= 2) v.push_back(b);
  return v;
}

// Elements of the larger buffer for a nominal size in bytes.
inline int64_t count_for(const SweepOptions& o, int64_t bytes) {
  int64_t count = bytes / 4;
  if (o.op == Op::kAllgather || o.op == Op::kReduceScatter) count -= count % o.np;
  return count;
}

// Element counts of the two buffers of one rank for `count` (in == out for in-place ops).
struct Layout {
  int64_t in_count = 0;
  int64_t out_count = 0;
  bool in_place = true;
};

inline Layout layout_for(Op op, int64_t count, int np) {
  switch (op) {
    case Op::kAllreduce:
    case Op::kBroadcast:
      return {count, count, true};
    case Op::kAllgather:
      return {count / np, count, false};
    case Op::kReduceScatter:
      return {count, count / np, false};
  }
  return {};
}

// Small integers, so that every partial sum of up to a few thousand ranks is exact in f32 whatever
// the order of the additions: a correct collective matches the closed form bit for bit.
inline float pattern(int rank, int64_t i) {
  return static_cast<float>((i * 13 + static_cast<int64_t>(rank) * 101) % 251) - 125.0f;
}

inline void fill_check_input(Op op, int rank, int np, int64_t count, float* in, float* out) {
  Layout l = layout_for(op, count, np);
  for (int64_t i = 0; i < l.in_count; ++i) in[i] = pattern(rank, i);
  if (op == Op::kBroadcast && rank != 0) {
    for (int64_t i = 0; i < l.in_count; ++i) in[i] = -1000.0f;  // must be overwritten by the root's
  }
  if (!l.in_place && out) {
    for (int64_t i = 0; i < l.out_count; ++i) out[i] = -1000.0f;
  }
}

inline float expected_value(Op op, int rank, int np, int64_t count, int64_t i) {
  switch (op) {
    case Op::kAllreduce: {
      float s = 0;
      for (int r = 0; r < np; ++r) s += pattern(r, i);
      return s;
    }
    case Op::kAllgather: {
      int64_t block = count / np;
      return pattern(static_cast<int>(i / block), i % block);
    }
    case Op::kReduceScatter: {
      int64_t j = static_cast<int64_t>(rank) * (count / np) + i;
      float s = 0;
      for (int r = 0; r < np; ++r) s += pattern(r, j);
      return s;
    }
    case Op::kBroadcast:
      return pattern(0, i);
  }
  return NAN;
}

// Returns "" when out (the op's output on `rank`) matches the closed form, else the first mismatch.
inline std::string verify_output(Op op, int rank, int np, int64_t count, const float* out) {
  Layout l = layout_for(op, count, np);
  for (int64_t i = 0; i < l.out_count; ++i) {
    float want = expected_value(op, rank, np, count, i);
    if (out[i] != want) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "element %lld of %lld is %g but %g was expected",
                    static_cast<long long>(i), static_cast<long long>(l.out_count),
                    static_cast<double>(out[i]), static_cast<double>(want));
      return buf;
    }
  }
  return "";
}

// One line to fd 1 with a single write(2).
inline void emit(const std::string& line) {
  std::string s = line + "\n";
  const char* p = s.data();
  size_t left = s.size();
  while (left > 0) {
    ssize_t n = ::write(1, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// One way of running the op (a library with one algorithm or setting) on one rank.
class Backend {
 public:
  virtual ~Backend() = default;
  // Name in result lines; no spaces.
  virtual std::string config() const = 0;
  // Allocates (or resizes) the buffers for `count` elements (see Layout) and any per-size state.
  virtual void prepare(int64_t count) = 0;
  virtual float* in() = 0;
  virtual float* out() = 0;  // == in() for in-place ops
  virtual void run() = 0;    // one collective
  virtual void barrier() = 0;
  // The largest of the ranks' values, on every rank (an allreduce through the library itself).
  virtual double max_over_ranks(double value) = 0;
  // Called after the warm-up runs of a size: the algorithm actually used, if the library says.
  virtual std::string algorithm() { return config(); }
};

// A 64-byte aligned float buffer that only grows (the anchors' rank buffers; loom's side uses
// tensors). Growing discards the contents: prepare() refills every buffer before it is read.
struct AlignedFloats {
  float* p = nullptr;
  size_t n = 0;
  AlignedFloats() = default;
  AlignedFloats(const AlignedFloats&) = delete;
  AlignedFloats& operator=(const AlignedFloats&) = delete;
  ~AlignedFloats() { std::free(p); }
  void resize(size_t count) {
    if (count <= n && p) return;
    std::free(p);
    p = static_cast<float*>(std::aligned_alloc(64, ((count * 4 + 63) / 64) * 64 + 64));
    if (!p) throw std::bad_alloc();
    n = count;
  }
};

// One anchor rank's buffers for a size (see Layout): `out` stays empty for in-place ops.
struct RankBuffers {
  AlignedFloats in, out;
  int64_t count = 0;  // elements of the larger buffer
  int64_t block = 0;  // count / np: the per-rank block of allgather and reduce_scatter
  void prepare(Op op, int64_t n, int np) {
    Layout l = layout_for(op, n, np);
    in.resize(static_cast<size_t>(l.in_count));
    if (!l.in_place) out.resize(static_cast<size_t>(l.out_count));
    count = n;
    block = n / np;
  }
};

// Note [sweep test hook]
// LOOM_BENCH_TEST_FAULT makes a rank misbehave on purpose, for the tests of the deadlines of `loom
// bench collectives` (tests/integration/bench_collectives_fault.sh); it is no part of a
// measurement. Its value is a comma-separated list of CONFIG:RANK:BYTES:ACTION, where CONFIG is a
// configuration as in result lines (loom, default for OpenMPI, ring, bcube, ... for Gloo; * for
// any), BYTES a size of the sweep, and ACTION what the rank does before that size's first
// collective:
//   hang   stops there (SIGTERM ends it), as a rank waiting for a peer that never comes
//   stuck  the same, ignoring SIGTERM (only SIGKILL ends it), as a rank spinning in a library
//   exit   says so on stderr and exits with status 5
//   abort  says so on stderr and aborts (SIGABRT)
// A malformed value stops the rank with status 2 and a message.
inline void test_fault(const std::string& spec, const std::string& config, int rank,
                       int64_t bytes) {
  if (spec.empty()) return;
  std::stringstream all(spec);
  std::string entry;
  while (std::getline(all, entry, ',')) {
    std::stringstream es(entry);
    std::string c, r, b, action;
    std::getline(es, c, ':');
    std::getline(es, r, ':');
    std::getline(es, b, ':');
    std::getline(es, action, ':');
    char* end = nullptr;
    const long want_rank = std::strtol(r.c_str(), &end, 10);
    const bool rank_ok = !r.empty() && *end == '\0';
    const int64_t want_bytes = parse_bytes(b);
    if (c.empty() || !rank_ok || want_bytes < 0 ||
        (action != "hang" && action != "stuck" && action != "exit" && action != "abort")) {
      std::fprintf(stderr,
                   "LOOM_BENCH_TEST_FAULT: malformed entry '%s' (want CONFIG:RANK:BYTES:"
                   "hang|stuck|exit|abort)\n",
                   entry.c_str());
      std::exit(2);
    }
    if ((c != "*" && c != config) || want_rank != rank || want_bytes != bytes) continue;
    std::fprintf(stderr, "test fault: rank %d %s at %lld bytes in %s\n", rank,
                 action == "exit"    ? "exits"
                 : action == "abort" ? "aborts"
                                     : "stops",
                 static_cast<long long>(bytes), config.c_str());
    std::fflush(stderr);
    if (action == "exit") std::_Exit(5);
    if (action == "abort") std::abort();
    if (action == "stuck") {
      ::signal(SIGTERM, SIG_IGN);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // not even an orphan may outlive its launcher
    }
    for (;;) ::pause();
  }
}

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n == 0 ? NAN : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Runs the sweep on this rank for each backend in turn (all ranks pass the same list). Returns the
// number of failed checks on this rank.
inline int run_sweep(const SweepOptions& o, int rank, const std::vector<Backend*>& backends) {
  using Clock = std::chrono::steady_clock;
  int failures = 0;
  for (int64_t bytes : sweep_sizes(o)) {
    const int64_t count = count_for(o, bytes);
    if (count <= 0) continue;
    const int warmup = std::max(1, o.warmup);
    const Layout l = layout_for(o.op, count, o.np);
    for (Backend* b : backends) {
      emit("begin " + b->config() + " " + std::to_string(bytes) + " " + std::to_string(rank));
      test_fault(o.test_fault, b->config(), rank, bytes);
      b->prepare(count);
      if (o.check) {
        // An output inside the input (Gloo's in-place reduce-scatter) must keep the input's
        // pattern.
        float* out = b->out();
        bool separate = !l.in_place && (out < b->in() || out >= b->in() + l.in_count);
        fill_check_input(o.op, rank, o.np, count, b->in(), separate ? out : nullptr);
        // Gloo's older algorithms write into a peer's output as soon as they start, without waiting
        // for it to be ready: every rank fills before anyone runs and verifies before anyone goes
        // on.
        b->barrier();
        b->run();
        std::string bad = verify_output(o.op, rank, o.np, count, b->out());
        b->barrier();
        if (!bad.empty()) ++failures;
        emit("check " + b->config() + " " + std::to_string(count * 4) + " " + std::to_string(rank) +
             (bad.empty() ? " ok" : " FAILED " + bad));
      }
      std::fill(b->in(), b->in() + l.in_count, 0.0f);
      if (!l.in_place) std::fill(b->out(), b->out() + l.out_count, 0.0f);
      b->barrier();
      auto w0 = Clock::now();
      for (int w = 0; w < warmup; ++w) b->run();
      double warm_us =
          std::chrono::duration<double, std::micro>(Clock::now() - w0).count() / warmup;
      const std::string algorithm = b->algorithm();
      warm_us = b->max_over_ranks(warm_us);
      const int runs = static_cast<int>(std::clamp(o.block_ms * 1e3 / std::max(warm_us, 1e-3), 1.0,
                                                   static_cast<double>(o.iters)));
      std::vector<double> per_run;
      for (int r = 0; r < o.repeats; ++r) {
        b->barrier();
        auto t0 = Clock::now();
        for (int k = 0; k < runs; ++k) b->run();
        auto t1 = Clock::now();
        per_run.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / runs);
      }
      for (double& t : per_run) t = b->max_over_ranks(t);
      if (rank == 0) {
        char buf[200];
        std::snprintf(buf, sizeof(buf), "result %s %s %lld %lld %.3f", b->config().c_str(),
                      algorithm.c_str(), static_cast<long long>(count * 4),
                      static_cast<long long>(count), median_of(per_run));
        emit(buf);
      }
    }
  }
  return failures;
}

// The options every sweep program takes: --np --op --sizes --iters --warmup --repeats --block-ms
// --check.
// Returns "" or an error; unknown options are left to the caller through `rest`.
inline std::string parse_sweep_args(const std::vector<std::string>& args, SweepOptions* o,
                                    std::vector<std::string>* rest) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](int64_t* out) -> std::string {
      if (i + 1 >= args.size()) return a + " needs a value";
      char* end = nullptr;
      *out = std::strtoll(args[++i].c_str(), &end, 10);
      if (!end || *end != '\0' || *out < 1)
        return a + " expects a positive integer but got '" + args[i] + "'";
      return "";
    };
    int64_t v = 0;
    std::string err;
    if (a == "--check") {
      o->check = true;
    } else if (a == "--op") {
      if (i + 1 >= args.size()) return "--op needs a value";
      if (!parse_op(args[++i], &o->op)) {
        return "--op must be allreduce, allgather, reduce_scatter or broadcast but got '" +
               args[i] + "'";
      }
    } else if (a == "--sizes") {
      if (i + 1 >= args.size()) return "--sizes needs a value";
      err = parse_sizes(args[++i], o);
    } else if (a == "--np") {
      if ((err = value(&v)).empty()) o->np = static_cast<int>(v);
    } else if (a == "--iters") {
      if ((err = value(&v)).empty()) o->iters = static_cast<int>(v);
    } else if (a == "--warmup") {
      if ((err = value(&v)).empty()) o->warmup = static_cast<int>(v);
    } else if (a == "--repeats") {
      if ((err = value(&v)).empty()) o->repeats = static_cast<int>(v);
    } else if (a == "--block-ms") {
      if ((err = value(&v)).empty()) o->block_ms = static_cast<int>(v);
    } else {
      rest->push_back(a);
    }
    if (!err.empty()) return err;
  }
  return "";
}

// The same options as arguments for another sweep program.
inline std::vector<std::string> sweep_args(const SweepOptions& o) {
  std::vector<std::string> a = {
      "--np",       std::to_string(o.np),
      "--op",       op_name(o.op),
      "--sizes",    std::to_string(o.min_bytes) + ":" + std::to_string(o.max_bytes),
      "--iters",    std::to_string(o.iters),
      "--warmup",   std::to_string(o.warmup),
      "--repeats",  std::to_string(o.repeats),
      "--block-ms", std::to_string(o.block_ms)};
  if (o.check) a.push_back("--check");
  return a;
}

}  // namespace loom::bench::coll
