// The device check of index values (Note [Device index checks] in index_check.h).
#include "ops/cuda/index_check.h"

#include "loom/cuda.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/index_kernels.h"

namespace loom::cuda_ops {

Tensor checked_indices(const char* name, const Tensor& index, int64_t limit,
                       std::optional<int64_t> ignore,
                       const std::function<void(int64_t value)>& fail) {
  const Tensor idx = index.to(kInt64).contiguous();
  const int64_t n = idx.numel();
  if (n == 0) return idx;
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
  return idx;
}

}  // namespace loom::cuda_ops
