// cuBLASLt matrix products: one handle per device, a workspace from the caching allocator, and the
// heuristic's algorithm cached per problem.
//
// Note [Row-major products on cuBLASLt]
// loom's matrices are row-major, cuBLASLt's column-major. A row-major [n, m] matrix with leading
// dimension ld is the column-major [m, n] matrix with the same ld, its transpose; so C = A B is
// computed as C^T = B^T A^T: cuBLASLt's first operand is our b, its second our a, and the result is
// column-major [m, n], our c. An operand whose rows are unit-stride is passed as is (op N), one
// whose columns are unit-stride as the transpose (op T), so transposed views and column slices need
// no copy. The bias epilogue adds a vector along the result's column-major rows: m elements, one
// per output column of our c, which is what linear's bias is.
//
// Note [cuBLASLt algorithm cache]
// The heuristic (cublasLtMatmulAlgoGetHeuristic) costs tens of microseconds, a small product about
// as much, so its answer is kept per (device, dtype, TF32, epilogue, shape, transposes, leading
// dimensions, batch strides, pointer alignments): everything the descriptors are made of. The
// alignments matter because the heuristic is told them (a column slice of a matrix may start at an
// odd element), and an algorithm chosen for 256-byte aligned operands may not run on others.
#include "ops/cuda/cublas_lt.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "loom/cuda.h"
#include "loom/error.h"
#include "loom/tensor.h"
#include "ops/cuda/cuda_ops.h"

namespace loom::cuda_ops {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;

void check_lt(cublasStatus_t s, const char* call, const char* op) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  LOOM_THROW(DeviceError, "[cuda] ", call, " failed in ", op, ": ", cublasLtGetStatusString(s),
             " (cublasStatus_t ", static_cast<int>(s), ")");
}

// The device's handle, made on first use and kept for the process (destroying it at exit could run
// after the CUDA runtime has shut down).
cublasLtHandle_t handle_for(int device, const char* op) {
  static std::mutex mu;
  static auto* handles = new std::vector<cublasLtHandle_t>();
  std::lock_guard<std::mutex> lock(mu);
  if (handles->size() <= static_cast<size_t>(device)) {
    handles->resize(static_cast<size_t>(device) + 1, nullptr);
  }
  cublasLtHandle_t& h = (*handles)[static_cast<size_t>(device)];
  if (h == nullptr) check_lt(cublasLtCreate(&h), "cublasLtCreate", op);
  return h;
}

// RAII owners of the descriptors of one call.
struct MatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~MatmulDesc() {
    if (d != nullptr) cublasLtMatmulDescDestroy(d);
  }
};
struct MatrixLayout {
  cublasLtMatrixLayout_t d = nullptr;
  ~MatrixLayout() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
  }
};
struct Preference {
  cublasLtMatmulPreference_t d = nullptr;
  ~Preference() {
    if (d != nullptr) cublasLtMatmulPreferenceDestroy(d);
  }
};

cudaDataType_t data_type(DType dt) {
  switch (dt) {
    case kFloat64:
      return CUDA_R_64F;
    case kFloat16:
      return CUDA_R_16F;
    case kBFloat16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

// The largest power of two (at most 256, cuBLASLt's default requirement) dividing the address.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

cublasLtEpilogue_t epilogue_of(GemmEpilogue e) {
  switch (e) {
    case GemmEpilogue::Bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::ReluBias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case GemmEpilogue::GeluBias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case GemmEpilogue::None:
      break;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// Everything the descriptors of a call are made of (Note [cuBLASLt algorithm cache]).
struct AlgoKey {
  int device = 0;
  DType dtype = kFloat32;
  bool tf32 = false;
  GemmEpilogue epilogue = GemmEpilogue::None;
  bool trans_a = false, trans_b = false;
  int64_t batch = 0, n = 0, m = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  uint32_t align_a = 0, align_b = 0, align_c = 0, align_bias = 0;
  bool operator==(const AlgoKey&) const = default;
};

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(k.device));
    mix(static_cast<uint64_t>(k.dtype));
    mix((k.tf32 ? 1u : 0u) | (k.trans_a ? 2u : 0u) | (k.trans_b ? 4u : 0u));
    mix(static_cast<uint64_t>(k.epilogue));
    for (int64_t v :
         {k.batch, k.n, k.m, k.k, k.lda, k.ldb, k.ldc, k.stride_a, k.stride_b, k.stride_c}) {
      mix(static_cast<uint64_t>(v));
    }
    mix((uint64_t{k.align_a} << 48) | (uint64_t{k.align_b} << 32) | (uint64_t{k.align_c} << 16) |
        k.align_bias);
    return static_cast<size_t>(h);
  }
};

class AlgoCache {
 public:
  // The cached algorithm for `key`, or the heuristic's (then cached); false when none runs it.
  template <class F>
  bool find(const AlgoKey& key, cublasLtMatmulAlgo_t* algo, const F& ask_heuristic) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      Entry e;
      e.found = ask_heuristic(&e.algo);
      it = map_.emplace(key, e).first;
    }
    *algo = it->second.algo;
    return it->second.found;
  }

 private:
  struct Entry {
    bool found = false;
    cublasLtMatmulAlgo_t algo{};
  };
  std::mutex mu_;
  std::unordered_map<AlgoKey, Entry, AlgoKeyHash> map_;
};

AlgoCache& algo_cache() {
  static auto* cache = new AlgoCache();  // kept for the process, as the handles
  return *cache;
}

void set_layout_batch(const MatrixLayout& l, int64_t batch, int64_t stride, const char* op) {
  if (batch <= 1) return;
  const auto count = static_cast<int32_t>(batch);
  check_lt(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof(count)),
           "cublasLtMatrixLayoutSetAttribute", op);
  check_lt(cublasLtMatrixLayoutSetAttribute(l.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                            &stride, sizeof(stride)),
           "cublasLtMatrixLayoutSetAttribute", op);
}

void set_pref_u32(const Preference& p, cublasLtMatmulPreferenceAttributes_t attr, uint32_t v,
                  const char* op) {
  check_lt(cublasLtMatmulPreferenceSetAttribute(p.d, attr, &v, sizeof(v)),
           "cublasLtMatmulPreferenceSetAttribute", op);
}

}  // namespace

bool lt_supports(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || dtype == kFloat16 || dtype == kBFloat16;
}

bool gemm(const GemmArgs& g, Device device, const char* op) {
  LOOM_INTERNAL_ASSERT(lt_supports(g.dtype) && g.n >= 1 && g.m >= 1 && g.k >= 1 && g.batch >= 1,
                       "[", op, "] cuBLASLt product of dtype ", g.dtype, " and sizes ", g.batch,
                       " x ", g.n, " x ", g.m, " x ", g.k);
  LOOM_CHECK(g.batch <= INT_MAX, "[", op, "] a batch of ", g.batch,
             " products exceeds what cuBLASLt takes (", INT_MAX, ")");
  const int dev = device.index();
  const bool tf32 = g.dtype == kFloat32 && cuda::allow_tf32();
  const bool has_bias = g.epilogue != GemmEpilogue::None;
  // cuBLASLt's operands: first our b, then our a (Note [Row-major products on cuBLASLt]).
  const GemmOperand& x = g.b;
  const GemmOperand& y = g.a;
  AlgoKey key;
  key.device = dev;
  key.dtype = g.dtype;
  key.tf32 = tf32;
  key.epilogue = g.epilogue;
  key.trans_a = x.trans;
  key.trans_b = y.trans;
  key.batch = g.batch;
  key.n = g.n;
  key.m = g.m;
  key.k = g.k;
  key.lda = x.ld;
  key.ldb = y.ld;
  key.ldc = g.ldc;
  key.stride_a = g.batch > 1 ? x.batch_stride : 0;
  key.stride_b = g.batch > 1 ? y.batch_stride : 0;
  key.stride_c = g.batch > 1 ? g.c_batch_stride : 0;
  key.align_a = alignment_of(x.data);
  key.align_b = alignment_of(y.data);
  key.align_c = alignment_of(g.c);
  key.align_bias = has_bias ? alignment_of(g.bias) : 0;

  const cudaDataType_t type = data_type(g.dtype);
  const bool f64 = g.dtype == kFloat64;
  const cublasComputeType_t compute = f64    ? CUBLAS_COMPUTE_64F
                                      : tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                             : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;

  MatmulDesc desc;
  check_lt(cublasLtMatmulDescCreate(&desc.d, compute, scale_type), "cublasLtMatmulDescCreate", op);
  const int32_t op_a = x.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = y.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)),
           "cublasLtMatmulDescSetAttribute", op);
  check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)),
           "cublasLtMatmulDescSetAttribute", op);
  if (has_bias) {
    const uint32_t epi = epilogue_of(g.epilogue);
    check_lt(
        cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
        "cublasLtMatmulDescSetAttribute", op);
    check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias,
                                            sizeof(g.bias)),
             "cublasLtMatmulDescSetAttribute", op);
  }

  // Stored (pre-op) shapes, column-major: x is [m, k] (op N) or [k, m] (op T); y is [k, n] or
  // [n, k]; c is [m, n].
  MatrixLayout lx, ly, lc;
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  check_lt(
      cublasLtMatrixLayoutCreate(&lx.d, type, u(x.trans ? g.k : g.m), u(x.trans ? g.m : g.k), x.ld),
      "cublasLtMatrixLayoutCreate", op);
  check_lt(
      cublasLtMatrixLayoutCreate(&ly.d, type, u(y.trans ? g.n : g.k), u(y.trans ? g.k : g.n), y.ld),
      "cublasLtMatrixLayoutCreate", op);
  check_lt(cublasLtMatrixLayoutCreate(&lc.d, type, u(g.m), u(g.n), g.ldc),
           "cublasLtMatrixLayoutCreate", op);
  set_layout_batch(lx, g.batch, key.stride_a, op);
  set_layout_batch(ly, g.batch, key.stride_b, op);
  set_layout_batch(lc, g.batch, key.stride_c, op);

  cublasLtHandle_t handle = handle_for(dev, op);
  cublasLtMatmulAlgo_t algo{};
  const bool found = algo_cache().find(key, &algo, [&](cublasLtMatmulAlgo_t* out) {
    Preference pref;
    check_lt(cublasLtMatmulPreferenceCreate(&pref.d), "cublasLtMatmulPreferenceCreate", op);
    const uint64_t ws = kWorkspaceBytes;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &ws, sizeof(ws)),
             "cublasLtMatmulPreferenceSetAttribute", op);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_a, op);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_b, op);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c, op);
    set_pref_u32(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c, op);
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    const cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(handle, desc.d, lx.d, ly.d, lc.d, lc.d,
                                                            pref.d, 1, &result, &returned);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED || (s == CUBLAS_STATUS_SUCCESS && returned == 0)) {
      return false;
    }
    check_lt(s, "cublasLtMatmulAlgoGetHeuristic", op);
    *out = result.algo;
    return true;
  });
  if (!found) return false;

  const Tensor workspace = empty_tensor({static_cast<int64_t>(kWorkspaceBytes)}, kUInt8, device);
  cudaStream_t stream = stream_of(device);
  const float alpha_f = static_cast<float>(g.alpha), beta_f = static_cast<float>(g.beta);
  const void* alpha = f64 ? static_cast<const void*>(&g.alpha) : &alpha_f;
  const void* beta = f64 ? static_cast<const void*>(&g.beta) : &beta_f;
  check_lt(cublasLtMatmul(handle, desc.d, alpha, x.data, lx.d, y.data, ly.d, beta, g.c, lc.d, g.c,
                          lc.d, &algo, workspace.data_ptr(), kWorkspaceBytes, stream),
           "cublasLtMatmul", op);
  return true;
}

}  // namespace loom::cuda_ops
