// The device check of index values (Note [Device index checks] in index_check.h).
#include "ops/cuda/index_check.h"

#include <deque>
#include <mutex>
#include <vector>

#include "loom/cuda.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/index_kernels.h"

namespace loom::cuda_ops {
namespace {

constexpr size_t kRememberedChecks = 8;
constexpr int64_t kRememberedMaxNumel = int64_t{1} << 20;

// A check that passed (Note [Remembered index checks]).
struct PassedCheck {
  Storage storage;  // held: the address stays this storage's while the record lives
  uint32_t version = 0;
  const void* data = nullptr;
  int64_t offset = 0;
  std::vector<int64_t> sizes, strides;
  DType dtype = kInt64;
  int64_t limit = 0;
  std::optional<int64_t> ignore;

  bool covers(const Tensor& t, int64_t lim, const std::optional<int64_t>& ign) const {
    return t.storage().get() == storage.get() && t.version() == version &&
           storage->data() == data && t.storage_offset() == offset && t.dtype() == dtype &&
           limit <= lim && (!ignore.has_value() || ignore == ign) && t.sizes().vec() == sizes &&
           t.strides().vec() == strides;
  }
};

struct Memory {
  std::mutex mu;
  std::deque<PassedCheck> passed;  // newest first
  int64_t device_checks = 0, remembered = 0;
};

Memory& memory() {
  static Memory* m = new Memory();  // never destroyed: checks may run during static destruction
  return *m;
}

// Whether a remembered check covers `t`; drops the records only they still hold.
bool remembered(const Tensor& t, int64_t limit, const std::optional<int64_t>& ignore) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  std::erase_if(m.passed, [](const PassedCheck& p) { return p.storage->use_count() == 1; });
  for (const PassedCheck& p : m.passed) {
    if (p.covers(t, limit, ignore)) {
      ++m.remembered;
      return true;
    }
  }
  ++m.device_checks;
  return false;
}

void remember(const Tensor& t, int64_t limit, const std::optional<int64_t>& ignore) {
  if (t.numel() > kRememberedMaxNumel) return;
  PassedCheck p;
  p.storage = t.storage();
  p.version = t.version();
  p.data = t.storage()->data();
  p.offset = t.storage_offset();
  p.sizes = t.sizes().vec();
  p.strides = t.strides().vec();
  p.dtype = t.dtype();
  p.limit = limit;
  p.ignore = ignore;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.passed.push_front(std::move(p));
  if (m.passed.size() > kRememberedChecks) m.passed.pop_back();
}

}  // namespace

Tensor checked_indices(const char* name, const Tensor& index, int64_t limit,
                       std::optional<int64_t> ignore,
                       const std::function<void(int64_t value)>& fail) {
  const Tensor idx = index.to(kInt64).contiguous();
  const int64_t n = idx.numel();
  if (n == 0 || remembered(index, limit, ignore)) return idx;
  cudaStream_t stream = stream_of(idx);
  Tensor first = empty_tensor({1}, kInt64, idx.device());
  const auto* p = static_cast<const int64_t*>(idx.data_ptr());
  auto* fp = static_cast<unsigned long long*>(first.data_ptr());
  // "No bad position yet": all ones (a memset, not a copy from pageable host memory, which would
  // hold the host until the stream reached it).
  const unsigned long long none = static_cast<unsigned long long>(n);
  LOOM_CUDA_CHECK(cudaMemsetAsync(fp, 0xFF, sizeof(unsigned long long), stream), name);
  check_launch(
      launch_find_bad_index(p, n, limit, ignore.has_value(), ignore.value_or(0), fp, stream), name);
  unsigned long long pos = 0;
  LOOM_CUDA_CHECK(cudaMemcpyAsync(&pos, fp, sizeof(pos), cudaMemcpyDeviceToHost, stream), name);
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream), name);
  if (pos < none) {
    int64_t value = 0;
    LOOM_CUDA_CHECK(cudaMemcpyAsync(&value, p + pos, sizeof(value), cudaMemcpyDeviceToHost, stream),
                    name);
    LOOM_CUDA_CHECK(cudaStreamSynchronize(stream), name);
    fail(value);
  }
  remember(index, limit, ignore);
  return idx;
}

}  // namespace loom::cuda_ops

namespace loom::cuda {

IndexCheckCounts index_check_counts() {
  cuda_ops::Memory& m = cuda_ops::memory();
  std::lock_guard<std::mutex> lock(m.mu);
  return {m.device_checks, m.remembered};
}

}  // namespace loom::cuda
