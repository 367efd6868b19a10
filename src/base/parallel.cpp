// Note [Thread pool and BLAS]
// The pool has get_num_threads() - 1 workers; the calling thread takes a share of every job, so a
// width of 1 means "no workers at all". OpenBLAS is kept single-threaded and large matrix products
// are split across this pool instead (Note [One pool for BLAS] in src/ops/blas.h), so at most
// `width` threads compute at any time and no second pool spins on the cores. Two pools at full
// width on 2 cores made a quarter of libtorch's training steps 4x slower on our machines;
// OpenBLAS's workers busy-waiting after each product slowed loom's elementwise ops between products
// up to 3x.
#include "loom/parallel.h"

#include <pthread.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/config.h"
#include "loom/error.h"

extern "C" void openblas_set_num_threads(int num_threads);
extern "C" int openblas_get_num_threads(void);
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);

namespace loom {
namespace {

const config::IntSetting kNumThreads(
    "LOOM_NUM_THREADS", std::nullopt, 1, 4096,
    "intra-op threads, the only compute pool (OpenBLAS runs single-"
    "threaded and loom splits large products across the pool); "
    "default: the number of cores");

thread_local bool t_in_parallel = false;

class ThreadPool {
 public:
  explicit ThreadPool(int width) { start(width); }
  ~ThreadPool() { stop(); }

  int width() const { return width_; }

  void resize(int width) {
    std::lock_guard<std::mutex> submit(submit_mu_);
    stop();
    start(width);
  }

  // Runs fn over `chunks` chunks of [begin, end); returns false if the pool is busy with another
  // caller's job (the caller then runs serially).
  bool run(int64_t begin, int64_t end, int64_t chunks, detail::RangeFn fn, void* ctx) {
    std::unique_lock<std::mutex> submit(submit_mu_, std::try_to_lock);
    if (!submit.owns_lock()) return false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++generation_;
      job_ = Job{fn, ctx, begin, end, chunks, generation_.load() & 0xffffffffu};
      pending_.store(chunks, std::memory_order_relaxed);
      error_ = nullptr;
      ticket_.store(job_.gen << 32, std::memory_order_release);
    }
    cv_.notify_all();
    work(job_);  // the caller takes chunks too
    // Wait for chunks taken by workers.
    while (pending_.load(std::memory_order_acquire) != 0) {
      std::unique_lock<std::mutex> lock(mu_);
      done_cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
    }
    if (error_) std::rethrow_exception(error_);
    return true;
  }

 private:
  struct Job {
    detail::RangeFn fn = nullptr;
    void* ctx = nullptr;
    int64_t begin = 0, end = 0, chunks = 0;
    uint64_t gen = 0;  // low 32 bits of the generation that published this job
  };

  void start(int width) {
    width_ = width < 1 ? 1 : width;
    shutdown_ = false;
    for (int i = 1; i < width_; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  // Takes chunks of `job` until none is left. The ticket packs (generation, next chunk) so that a
  // worker that woke late for an older job can never take a chunk of a newer one.
  void work(const Job& job) {
    const int64_t n = job.end - job.begin;
    for (;;) {
      uint64_t t = ticket_.load(std::memory_order_acquire);
      if ((t >> 32) != job.gen) break;
      int64_t c = static_cast<int64_t>(t & 0xffffffffu);
      if (c >= job.chunks) break;
      if (!ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel)) continue;
      int64_t b = job.begin + n * c / job.chunks;
      int64_t e = job.begin + n * (c + 1) / job.chunks;
      bool was = t_in_parallel;
      t_in_parallel = true;
      try {
        job.fn(job.ctx, b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
      }
      t_in_parallel = was;
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> lock(mu_);
        done_cv_.notify_all();
      }
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    for (;;) {
      // Spin briefly: back-to-back small ops then avoid a futex round trip.
      for (int spin = 0; spin < 4000; ++spin) {
        if (generation_.load(std::memory_order_acquire) != seen || shutdown_) break;
        __builtin_ia32_pause();
      }
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return shutdown_ || generation_.load() != seen; });
        if (shutdown_) return;
        seen = generation_.load();
        job = job_;
      }
      work(job);
    }
  }

  int width_ = 1;
  std::vector<std::thread> workers_;
  std::mutex submit_mu_;  // one job at a time
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> shutdown_{false};
  Job job_;  // GUARDED_BY(mu_) while published
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int64_t> pending_{0};
  std::exception_ptr error_;  // GUARDED_BY(mu_)
};

int default_width() {
  const int hw = static_cast<int>(std::thread::hardware_concurrency());
  return static_cast<int>(kNumThreads.get_or(hw > 0 ? hw : 1));
}

// The pool is created on first use. A child process made by fork() has none of the parent's worker
// threads, so the child forgets the parent's pool (leaking it: its mutexes may be held by threads
// that do not exist here) and makes its own on first use, as PyTorch does.
std::atomic<ThreadPool*> g_pool{nullptr};
std::mutex g_pool_mu;

void forget_pool_in_child() {
  g_pool.store(nullptr, std::memory_order_relaxed);
  new (&g_pool_mu) std::mutex();
}

ThreadPool& pool() {
  ThreadPool* p = g_pool.load(std::memory_order_acquire);
  if (LOOM_LIKELY(p != nullptr)) return *p;
  std::lock_guard<std::mutex> lock(g_pool_mu);
  p = g_pool.load(std::memory_order_acquire);
  if (!p) {
    static bool registered = (pthread_atfork(nullptr, nullptr, &forget_pool_in_child), true);
    (void)registered;
    int w = default_width();
    openblas_set_num_threads(1);
    p = new ThreadPool(w);
    g_pool.store(p, std::memory_order_release);
  }
  return *p;
}

}  // namespace

int get_num_threads() {
  return pool().width();
}

void set_num_threads(int n) {
  LOOM_CHECK(n >= 1, "[parallel] set_num_threads expects n >= 1 but got ", n);
  LOOM_CHECK(!t_in_parallel, "[parallel] set_num_threads called inside a parallel region");
  pool().resize(n);
  openblas_set_num_threads(1);
}

bool in_parallel_region() {
  return t_in_parallel;
}

std::string blas_config() {
  return openblas_get_config();
}

BlasInfo blas_info() {
  BlasInfo b;
  b.config = openblas_get_config();
  b.core = openblas_get_corename();
  b.threads = openblas_get_num_threads();
  return b;
}

namespace detail {

void parallel_for_impl(int64_t begin, int64_t end, int64_t grain, RangeFn fn, void* ctx) {
  ThreadPool& p = pool();
  int64_t n = end - begin;
  if (grain < 1) grain = 1;
  int64_t chunks = std::min<int64_t>(p.width(), (n + grain - 1) / grain);
  if (chunks <= 1 || !p.run(begin, end, chunks, fn, ctx)) {
    bool was = t_in_parallel;
    t_in_parallel = true;
    try {
      fn(ctx, begin, end);
    } catch (...) {
      t_in_parallel = was;
      throw;
    }
    t_in_parallel = was;
  }
}

}  // namespace detail
}  // namespace loom
