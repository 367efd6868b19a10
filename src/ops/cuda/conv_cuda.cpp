// CUDA kernels of conv2d and convolution_backward on cuDNN's legacy convolution API, with the bias
// added and its gradient summed by loom's own loops (conv_kernels.cu). Geometry, shapes and errors
// come from conv2d_geometry and the shape functions in conv.cpp, as on the CPU.
//
// Note [cuDNN convolutions]
// - Operands are made contiguous NCHW (a no-op for the usual layouts); an unbatched input is a
// batch
//   of one. The output is written in place by cuDNN (beta 0).
// - Algorithms come from cuDNN's heuristics (cudnnGet*Algorithm_v7, which measure nothing): the
//   first one, in the heuristic's order, that reports success, whose workspace our descriptors
//   accept and that needs at most kMaxWorkspace. The choice and its workspace size are cached per
//   (device, dtype, TF32, pass, geometry). Workspace comes from the caching allocator, on the
//   stream the convolution runs on.
// - Math: float32 runs CUDNN_FMA_MATH (no tensor cores, exact float32) unless cuda::allow_tf32(),
//   then CUDNN_DEFAULT_MATH (TF32 allowed); float16 and bfloat16 run tensor-op math accumulating in
//   float32; float64 computes in double.
// - A cuDNN handle carries its stream, so each thread has its own handle per device, made on first
//   use and kept for the thread's life (they are not destroyed: at process exit the runtime may be
//   gone before thread-local destructors run).
#include <cudnn.h>

#include <climits>
#include <mutex>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "loom/cuda.h"
#include "ops/cuda/conv_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

constexpr size_t kMaxWorkspace = size_t{1} << 30;

void check_dnn(cudnnStatus_t s, const char* call, const char* op) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  LOOM_THROW(DeviceError, "[cuda] ", call, " failed in ", op, ": ", cudnnGetErrorString(s),
             " (cudnnStatus_t ", static_cast<int>(s), ")");
}

cudnnHandle_t handle_for(int device, cudaStream_t stream, const char* op) {
  thread_local std::vector<cudnnHandle_t> handles;
  if (handles.size() <= static_cast<size_t>(device)) {
    handles.resize(static_cast<size_t>(device) + 1, nullptr);
  }
  cudnnHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) check_dnn(cudnnCreate(&h), "cudnnCreate", op);
  check_dnn(cudnnSetStream(h, stream), "cudnnSetStream", op);
  return h;
}

cudnnDataType_t dnn_type(DType dt) {
  switch (dt) {
    case kFloat64:
      return CUDNN_DATA_DOUBLE;
    case kFloat16:
      return CUDNN_DATA_HALF;
    case kBFloat16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

int as_int(int64_t v, const char* what, const char* op) {
  LOOM_CHECK(v <= INT_MAX, "[", op, "] ", what, " = ", v, " exceeds what cuDNN takes (", INT_MAX,
             ")");
  return static_cast<int>(v);
}

// The descriptors of one convolution (RAII).
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;

  ConvDescs(const ConvGeometry& g, DType dt, bool tf32, const char* op) {
    const cudnnDataType_t t = dnn_type(dt);
    const int64_t x_numel = g.N * g.C * g.H * g.W, y_numel = g.N * g.Cout * g.Ho * g.Wo;
    LOOM_CHECK(x_numel <= INT_MAX && y_numel <= INT_MAX, "[", op,
               "] cuDNN takes tensors of fewer than 2^31 elements, but the input has ", x_numel,
               " and the output ", y_numel, "; split the batch");
    const int N = as_int(g.N, "batch", op), C = as_int(g.C, "channels", op);
    check_dnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor", op);
    check_dnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor", op);
    check_dnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor", op);
    check_dnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor", op);
    check_dnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, t, N, C, as_int(g.H, "height", op),
                                         as_int(g.W, "width", op)),
              "cudnnSetTensor4dDescriptor", op);
    check_dnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, t, N, as_int(g.Cout, "channels", op),
                                         as_int(g.Ho, "height", op), as_int(g.Wo, "width", op)),
              "cudnnSetTensor4dDescriptor", op);
    check_dnn(cudnnSetFilter4dDescriptor(w, t, CUDNN_TENSOR_NCHW, as_int(g.Cout, "channels", op),
                                         as_int(g.C / g.groups, "channels", op),
                                         as_int(g.kh, "kernel", op), as_int(g.kw, "kernel", op)),
              "cudnnSetFilter4dDescriptor", op);
    const cudnnDataType_t compute = dt == kFloat64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    check_dnn(
        cudnnSetConvolution2dDescriptor(
            conv, as_int(g.ph, "padding", op), as_int(g.pw, "padding", op),
            as_int(g.sh, "stride", op), as_int(g.sw, "stride", op), as_int(g.dh, "dilation", op),
            as_int(g.dw, "dilation", op), CUDNN_CROSS_CORRELATION, compute),
        "cudnnSetConvolution2dDescriptor", op);
    check_dnn(cudnnSetConvolutionGroupCount(conv, as_int(g.groups, "groups", op)),
              "cudnnSetConvolutionGroupCount", op);
    const cudnnMathType_t math = dt == kFloat32   ? (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)
                                 : dt == kFloat64 ? CUDNN_DEFAULT_MATH
                                                  : CUDNN_TENSOR_OP_MATH;
    check_dnn(cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType", op);
  }
  ~ConvDescs() {
    if (conv != nullptr) cudnnDestroyConvolutionDescriptor(conv);
    if (w != nullptr) cudnnDestroyFilterDescriptor(w);
    if (y != nullptr) cudnnDestroyTensorDescriptor(y);
    if (x != nullptr) cudnnDestroyTensorDescriptor(x);
  }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;
};

enum class Pass : uint8_t { Forward, BackwardData, BackwardFilter };

struct AlgoKey {
  int device = 0;
  DType dtype = kFloat32;
  bool tf32 = false;
  Pass pass = Pass::Forward;
  std::array<int64_t, 14> geometry{};
  bool operator==(const AlgoKey&) const = default;
};

struct AlgoKeyHash {
  size_t operator()(const AlgoKey& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(k.device));
    mix(static_cast<uint64_t>(k.dtype) | (k.tf32 ? 256u : 0u) |
        (static_cast<uint64_t>(k.pass) << 16));
    for (int64_t v : k.geometry) mix(static_cast<uint64_t>(v));
    return static_cast<size_t>(h);
  }
};

struct AlgoChoice {
  int algo = 0;
  size_t workspace = 0;
};

AlgoKey key_of(const ConvGeometry& g, DType dt, bool tf32, Pass pass, int device) {
  AlgoKey k;
  k.device = device;
  k.dtype = dt;
  k.tf32 = tf32;
  k.pass = pass;
  k.geometry = {g.N,  g.C,  g.H,  g.W,  g.Cout, g.kh, g.kw,
                g.sh, g.sw, g.ph, g.pw, g.dh,   g.dw, g.groups};
  return k;
}

// The cached choice for `key`, or `choose()`'s (then cached).
template <class F>
AlgoChoice cached_choice(const AlgoKey& key, const F& choose) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<AlgoKey, AlgoChoice, AlgoKeyHash>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  const AlgoChoice c = choose();
  std::lock_guard<std::mutex> lock(mu);
  cache->emplace(key, c);
  return c;
}

// The first usable of the heuristic's answers (Note [cuDNN convolutions]). `perf` holds `n`
// results with .algo and .status; workspace_of(algo, &bytes) asks cuDNN for an algorithm's
// workspace with our descriptors.
template <class Perf, class W>
AlgoChoice pick(const Perf* perf, int n, const W& workspace_of, const ConvGeometry& g,
                const char* op, const char* pass) {
  for (int i = 0; i < n; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (workspace_of(perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    if (bytes > kMaxWorkspace) continue;
    return {static_cast<int>(perf[i].algo), bytes};
  }
  LOOM_THROW(DeviceError, "[cuda] cuDNN has no ", pass, " algorithm in ", op, " for input [", g.N,
             ", ", g.C, ", ", g.H, ", ", g.W, "], weight [", g.Cout, ", ", g.C / g.groups, ", ",
             g.kh, ", ", g.kw, "], stride (", g.sh, ", ", g.sw, "), padding (", g.ph, ", ", g.pw,
             "), dilation (", g.dh, ", ", g.dw, "), groups ", g.groups);
}

// One scaling pair for cuDNN: double for float64 data, float otherwise.
struct Scaling {
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
  bool dbl;
  explicit Scaling(DType dt) : dbl(dt == kFloat64) {}
  const void* one() const { return dbl ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return dbl ? static_cast<const void*>(&d0) : &f0; }
};

Tensor workspace(size_t bytes, Device device) {
  return bytes == 0 ? Tensor() : empty_tensor({static_cast<int64_t>(bytes)}, kUInt8, device);
}

void* data_or_null(const Tensor& t) {
  return t.defined() ? t.data_ptr() : nullptr;
}

void forward(const Tensor& out, const Tensor& x, const Tensor& w, const ConvGeometry& g,
             const char* op) {
  const DType dt = x.dtype();
  const bool tf32 = dt == kFloat32 && cuda::allow_tf32();
  const ConvDescs d(g, dt, tf32, op);
  cudnnHandle_t h = handle_for(x.device().index(), cuda_ops::stream_of(x), op);
  const AlgoChoice c = cached_choice(key_of(g, dt, tf32, Pass::Forward, x.device().index()), [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    check_dnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y,
                                                     CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf),
              "cudnnGetConvolutionForwardAlgorithm_v7", op);
    auto ws = [&](cudnnConvolutionFwdAlgo_t a, size_t* bytes) {
      return cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, a, bytes);
    };
    return pick(perf, n, ws, g, op, "forward");
  });
  const Tensor ws = workspace(c.workspace, x.device());
  const Scaling s(dt);
  check_dnn(cudnnConvolutionForward(h, s.one(), d.x, x.data_ptr(), d.w, w.data_ptr(), d.conv,
                                    static_cast<cudnnConvolutionFwdAlgo_t>(c.algo),
                                    data_or_null(ws), c.workspace, s.zero(), d.y, out.data_ptr()),
            "cudnnConvolutionForward", op);
}

void backward_data(const Tensor& gi, const Tensor& go, const Tensor& w, const ConvGeometry& g,
                   const char* op) {
  const DType dt = go.dtype();
  const bool tf32 = dt == kFloat32 && cuda::allow_tf32();
  const ConvDescs d(g, dt, tf32, op);
  cudnnHandle_t h = handle_for(go.device().index(), cuda_ops::stream_of(go), op);
  const AlgoChoice c =
      cached_choice(key_of(g, dt, tf32, Pass::BackwardData, go.device().index()), [&] {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int n = 0;
        check_dnn(cudnnGetConvolutionBackwardDataAlgorithm_v7(
                      h, d.w, d.y, d.conv, d.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7", op);
        auto ws = [&](cudnnConvolutionBwdDataAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, a, bytes);
        };
        return pick(perf, n, ws, g, op, "backward-data");
      });
  const Tensor ws = workspace(c.workspace, go.device());
  const Scaling s(dt);
  check_dnn(
      cudnnConvolutionBackwardData(h, s.one(), d.w, w.data_ptr(), d.y, go.data_ptr(), d.conv,
                                   static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo),
                                   data_or_null(ws), c.workspace, s.zero(), d.x, gi.data_ptr()),
      "cudnnConvolutionBackwardData", op);
}

void backward_filter(const Tensor& gw, const Tensor& go, const Tensor& x, const ConvGeometry& g,
                     const char* op) {
  const DType dt = go.dtype();
  const bool tf32 = dt == kFloat32 && cuda::allow_tf32();
  const ConvDescs d(g, dt, tf32, op);
  cudnnHandle_t h = handle_for(go.device().index(), cuda_ops::stream_of(go), op);
  const AlgoChoice c =
      cached_choice(key_of(g, dt, tf32, Pass::BackwardFilter, go.device().index()), [&] {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        int n = 0;
        check_dnn(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                      h, d.x, d.y, d.conv, d.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf),
                  "cudnnGetConvolutionBackwardFilterAlgorithm_v7", op);
        auto ws = [&](cudnnConvolutionBwdFilterAlgo_t a, size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, a, bytes);
        };
        return pick(perf, n, ws, g, op, "backward-filter");
      });
  const Tensor ws = workspace(c.workspace, go.device());
  const Scaling s(dt);
  check_dnn(
      cudnnConvolutionBackwardFilter(h, s.one(), d.x, x.data_ptr(), d.y, go.data_ptr(), d.conv,
                                     static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo),
                                     data_or_null(ws), c.workspace, s.zero(), d.w, gw.data_ptr()),
      "cudnnConvolutionBackwardFilter", op);
}

Tensor conv2d_cuda(const Tensor& input, const Tensor& weight, const std::optional<Tensor>& bias,
                   IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation, int64_t groups) {
  constexpr const char* op = "conv2d";
  const ConvGeometry g =
      conv2d_geometry(op, input, weight, bias, stride, padding, dilation, groups);
  Tensor out = allocate_output(conv2d_shape(input, weight, bias, stride, padding, dilation, groups),
                               input.device());
  if (out.numel() == 0) return out;
  cuda_ops::KernelGuard guard(out);
  if (g.C == 0) {
    out.zero_();  // an empty sum (in_channels / groups == 0)
  } else {
    forward(out, input.contiguous(), weight.contiguous(), g, op);
  }
  if (bias.has_value() && bias->defined()) {
    const Tensor b = bias->contiguous();
    cuda_ops::check_launch(
        cuda_ops::launch_add_channel_bias(out.data_ptr(), b.data_ptr(), g.N, g.Cout, g.Ho * g.Wo,
                                          cuda_ops::code_of(out.dtype()), cuda_ops::stream_of(out)),
        "loom::conv2d");
  }
  return out;
}

std::tuple<Tensor, Tensor, Tensor> convolution_backward_cuda(
    const Tensor& grad_output, const Tensor& input, const Tensor& weight, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, int64_t groups, bool input_mask, bool weight_mask,
    bool bias_mask) {
  constexpr const char* op = "convolution_backward";
  const std::array<TensorMeta, 3> ms =
      convolution_backward_shape(grad_output, input, weight, stride, padding, dilation, groups,
                                 input_mask, weight_mask, bias_mask);
  const ConvGeometry g =
      conv2d_geometry(op, input, weight, std::nullopt, stride, padding, dilation, groups);
  const Device dev = input.device();
  std::array<Tensor, 3> outs;
  for (size_t i = 0; i < 3; ++i) {
    if (ms[i].defined) outs[i] = allocate_output(ms[i], dev);
  }
  cuda_ops::KernelGuard guard(input);
  const bool runs = g.N > 0 && g.C > 0 && g.Cout > 0;
  const Tensor go = grad_output.contiguous();
  if (outs[0].defined() && outs[0].numel() > 0) {
    if (runs)
      backward_data(outs[0], go, weight.contiguous(), g, op);
    else
      outs[0].zero_();
  }
  if (outs[1].defined() && outs[1].numel() > 0) {
    if (runs)
      backward_filter(outs[1], go, input.contiguous(), g, op);
    else
      outs[1].zero_();
  }
  if (outs[2].defined() && outs[2].numel() > 0) {
    cuda_ops::check_launch(
        cuda_ops::launch_channel_sum(go.data_ptr(), outs[2].data_ptr(), g.N, g.Cout, g.Ho * g.Wo,
                                     cuda_ops::code_of(go.dtype()), cuda_ops::stream_of(go)),
        "loom::convolution_backward");
  }
  return {outs[0], outs[1], outs[2]};
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CUDA, m) {
  m.impl("conv2d", conv2d_cuda);
  m.impl("convolution_backward", convolution_backward_cuda);
}

}  // namespace loom
