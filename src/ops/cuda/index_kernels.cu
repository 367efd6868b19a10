// CUDA kernels of the index family: the device check of index values, index_select (and so
// embedding), gather, scatter / scatter_add and embedding_dense_backward. Kernels that only move
// elements are type-erased by element size.
#include <cub/device/device_radix_sort.cuh>

#include "ops/cuda/index_kernels.h"
#include "ops/cuda/loops.cuh"

namespace loom::cuda_ops {
namespace {

constexpr int kBlock = 256;

unsigned blocks_for(int64_t n, int64_t per_block = kBlock) {
  int64_t b = (n + per_block - 1) / per_block;
  if (b > (int64_t{1} << 31) - 1) b = (int64_t{1} << 31) - 1;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// Calls f(E{}) with E an unsigned integer of `size` bytes.
template <class F>
cudaError_t by_size(int size, const F& f) {
  switch (size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    default:
      return f(uint64_t{});
  }
}

__global__ void find_bad_index_kernel(const int64_t* idx, int64_t n, int64_t limit, bool has_ignore,
                                      int64_t ignore, unsigned long long* first_bad) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t v = idx[i];
    if ((v < 0 || v >= limit) && !(has_ignore && v == ignore)) {
      // An integer minimum: the same position whatever the order of the threads.
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

template <class E>
__global__ void index_select_kernel(const E* src, E* out, const int64_t* idx, int64_t total,
                                    int64_t dim_size, int64_t n, int64_t inner) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = e % inner;
    const int64_t rest = e / inner;
    const int64_t k = rest % n, o = rest / n;
    out[e] = src[(o * dim_size + idx[k]) * inner + i];
  }
}

template <class E>
__global__ void gather_kernel(IndexGeometry g, int64_t total, const E* self, E* out,
                              const int64_t* idx) {
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = e, self_off = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      const int64_t c = rest % g.sizes[d];
      rest /= g.sizes[d];
      if (d != g.dim) self_off += c * g.self_strides[d];
    }
    // out and the index are contiguous with the index's shape: element e of both.
    out[e] = self[self_off + idx[e] * g.self_strides[g.dim]];
  }
}

template <class T>
__device__ __forceinline__ T add_values(T a, T b) {
  using M = opmath_t<T>;
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else {
    return convert<T>(convert<M>(a) + convert<M>(b));
  }
}

// One thread per row along g.dim; rows = (elements of the index) / (its size along dim).
template <class T, ScatterMode kMode>
__global__ void scatter_kernel(IndexGeometry g, int64_t rows, T* self, const T* src,
                               const int64_t* idx, T value) {
  const int64_t len = g.sizes[g.dim];
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int64_t rest = r, so = 0, ro = 0, io = 0;
    for (int d = g.ndim - 1; d >= 0; --d) {
      if (d == g.dim) continue;
      const int64_t c = rest % g.sizes[d];
      rest /= g.sizes[d];
      so += c * g.self_strides[d];
      ro += c * g.src_strides[d];
      io += c * g.idx_strides[d];
    }
    const int64_t sd = g.self_strides[g.dim], rd = g.src_strides[g.dim], id = g.idx_strides[g.dim];
    for (int64_t k = 0; k < len; ++k) {
      T* dst = self + so + idx[io + k * id] * sd;
      if constexpr (kMode == ScatterMode::Src) {
        *dst = src[ro + k * rd];
      } else if constexpr (kMode == ScatterMode::Value) {
        *dst = value;
      } else {
        *dst = add_values(*dst, src[ro + k * rd]);
      }
    }
  }
}

// Marks each run of equal sorted keys: bounds[2 key] is its first position and bounds[2 key + 1]
// one past its last. Rows no index names keep the [0, 0) of the memset before. (A binary search
// per result row instead cost 26 dependent loads a row: the latency bound of the whole backward
// for a 50304-row vocabulary.)
__global__ void segment_bounds_kernel(const int64_t* keys, int64_t n, int64_t* bounds) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = keys[i];
    if (i == 0 || keys[i - 1] != k) bounds[2 * k] = i;
    if (i == n - 1 || keys[i + 1] != k) bounds[2 * k + 1] = i + 1;
  }
}

// Block r: result row r, each thread a column, the row's positions added in order.
template <class T>
__global__ void embedding_backward_kernel(const T* grad, const int64_t* bounds,
                                          const int64_t* positions, int64_t dim,
                                          int64_t padding_idx, T* out) {
  using M = opmath_t<T>;
  const int64_t r = blockIdx.x;
  int64_t lo = 0, hi = 0;
  if (r != padding_idx && bounds != nullptr) {
    lo = bounds[2 * r];
    hi = bounds[2 * r + 1];
  }
  for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
    M acc = M(0);
    for (int64_t k = lo; k < hi; ++k) acc += convert<M>(grad[positions[k] * dim + j]);
    out[r * dim + j] = convert<T>(acc);
  }
}

__global__ void iota_kernel(int64_t* p, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p[i] = i;
}

size_t align_up(size_t n) {
  return (n + 255) / 256 * 256;
}

int key_bits(int64_t num_weights) {
  int bits = 1;
  while (bits < 63 && (int64_t{1} << bits) < num_weights) ++bits;
  return bits;
}

size_t cub_sort_bytes(int64_t n, int64_t num_weights) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(
      nullptr, bytes, static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
      static_cast<const int64_t*>(nullptr), static_cast<int64_t*>(nullptr), static_cast<int>(n), 0,
      key_bits(num_weights));
  return bytes;
}

}  // namespace

cudaError_t launch_find_bad_index(const int64_t* idx, int64_t n, int64_t limit, bool has_ignore,
                                  int64_t ignore, unsigned long long* first_bad,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = std::min<unsigned>(blocks_for(n), 4096);
  find_bad_index_kernel<<<blocks, kBlock, 0, stream>>>(idx, n, limit, has_ignore, ignore,
                                                       first_bad);
  return cudaGetLastError();
}

cudaError_t launch_index_select(const void* src, void* out, const int64_t* idx, int64_t outer,
                                int64_t dim_size, int64_t n, int64_t inner, int elem_size,
                                cudaStream_t stream) {
  const int64_t total = outer * n * inner;
  if (total == 0) return cudaSuccess;
  return by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    index_select_kernel<E><<<blocks_for(total), kBlock, 0, stream>>>(
        static_cast<const E*>(src), static_cast<E*>(out), idx, total, dim_size, n, inner);
    return cudaGetLastError();
  });
}

cudaError_t launch_gather(const IndexGeometry& g, const void* self, void* out, const int64_t* idx,
                          int elem_size, cudaStream_t stream) {
  int64_t total = 1;
  for (int d = 0; d < g.ndim; ++d) total *= g.sizes[d];
  if (total == 0) return cudaSuccess;
  return by_size(elem_size, [&](auto tag) {
    using E = decltype(tag);
    gather_kernel<E><<<blocks_for(total), kBlock, 0, stream>>>(
        g, total, static_cast<const E*>(self), static_cast<E*>(out), idx);
    return cudaGetLastError();
  });
}

cudaError_t launch_scatter(const IndexGeometry& g, ScatterMode mode, ScalarCode dt, void* self,
                           const void* src, const int64_t* idx, uint64_t value_bits,
                           cudaStream_t stream) {
  int64_t total = 1;
  for (int d = 0; d < g.ndim; ++d) total *= g.sizes[d];
  const int64_t len = g.sizes[g.dim];
  if (total == 0 || len == 0) return cudaSuccess;
  const int64_t rows = total / len;
  const unsigned blocks = blocks_for(rows, 128);
  if (mode == ScatterMode::Add) {
    return LOOM_CUDA_DISPATCH_ALL(dt, [&] {
      using T = scalar_t;
      scatter_kernel<T, ScatterMode::Add><<<blocks, 128, 0, stream>>>(
          g, rows, static_cast<T*>(self), static_cast<const T*>(src), idx, T{});
      return cudaGetLastError();
    });
  }
  return by_size(scalar_size(dt), [&](auto tag) {
    using E = decltype(tag);
    E value{};
    memcpy(&value, &value_bits, sizeof(E));
    if (mode == ScatterMode::Src) {
      scatter_kernel<E, ScatterMode::Src><<<blocks, 128, 0, stream>>>(
          g, rows, static_cast<E*>(self), static_cast<const E*>(src), idx, value);
    } else {
      scatter_kernel<E, ScatterMode::Value>
          <<<blocks, 128, 0, stream>>>(g, rows, static_cast<E*>(self), nullptr, idx, value);
    }
    return cudaGetLastError();
  });
}

size_t embedding_backward_workspace_bytes(int64_t n, int64_t num_weights) {
  if (n == 0) return 0;
  return 3 * align_up(static_cast<size_t>(n) * sizeof(int64_t)) +
         align_up(2 * static_cast<size_t>(num_weights) * sizeof(int64_t)) +
         align_up(cub_sort_bytes(n, num_weights));
}

cudaError_t launch_embedding_backward(ScalarCode dt, const void* grad, const int64_t* idx,
                                      int64_t n, int64_t dim, int64_t num_weights,
                                      int64_t padding_idx, void* out, void* workspace,
                                      size_t workspace_bytes, cudaStream_t stream) {
  if (num_weights == 0 || dim == 0) return cudaSuccess;
  int64_t* bounds = nullptr;
  int64_t* positions = nullptr;
  if (n > 0) {
    char* w = static_cast<char*>(workspace);
    const size_t slot = align_up(static_cast<size_t>(n) * sizeof(int64_t));
    const size_t bounds_bytes = 2 * static_cast<size_t>(num_weights) * sizeof(int64_t);
    int64_t* keys = reinterpret_cast<int64_t*>(w);
    int64_t* order = reinterpret_cast<int64_t*>(w + slot);
    positions = reinterpret_cast<int64_t*>(w + 2 * slot);
    bounds = reinterpret_cast<int64_t*>(w + 3 * slot);
    char* temp = w + 3 * slot + align_up(bounds_bytes);
    size_t temp_bytes = workspace_bytes - 3 * slot - align_up(bounds_bytes);
    const unsigned blocks = std::min<unsigned>(blocks_for(n), 4096);
    iota_kernel<<<blocks, kBlock, 0, stream>>>(order, n);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return e;
    // LSD radix sort: stable, so equal indices keep their positions in increasing order.
    e = cub::DeviceRadixSort::SortPairs(temp, temp_bytes, idx, keys, order, positions,
                                        static_cast<int>(n), 0, key_bits(num_weights), stream);
    if (e != cudaSuccess) return e;
    e = cudaMemsetAsync(bounds, 0, bounds_bytes, stream);
    if (e != cudaSuccess) return e;
    segment_bounds_kernel<<<blocks, kBlock, 0, stream>>>(keys, n, bounds);
    e = cudaGetLastError();
    if (e != cudaSuccess) return e;
  }
  return LOOM_CUDA_DISPATCH_FLOAT(dt, [&] {
    using T = scalar_t;
    const int threads = dim >= 256 ? 256 : (dim >= 128 ? 128 : (dim >= 64 ? 64 : 32));
    embedding_backward_kernel<T><<<static_cast<unsigned>(num_weights), threads, 0, stream>>>(
        static_cast<const T*>(grad), bounds, positions, dim, padding_idx, static_cast<T*>(out));
    return cudaGetLastError();
  });
}

}  // namespace loom::cuda_ops
