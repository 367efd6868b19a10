// Every gradcheck case again with its inputs on the GPU (float64), and backward across CUDA
// streams. ctest runs these as `cuda_gradcheck` (label cuda); without a GPU they skip.
#include <gtest/gtest.h>

#include <cstdio>

#include "autograd/gradcheck_cases.h"
#include "loom/autograd.h"
#include "loom/cuda.h"
#include "loom/ops.h"
#include "loom/stream.h"

namespace loom::testing {
namespace {

const Device kCuda(DeviceType::CUDA, 0);

std::vector<Tensor> on_device(const std::vector<Tensor>& in) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) {
    Tensor d = t.detach().to(kCuda);
    if (t.requires_grad()) d.requires_grad_();
    out.push_back(d);
  }
  return out;
}

// A case whose function makes its own CPU tensors (index, target or mask constants captured when
// the case was written) cannot run with its inputs on the GPU: the operator refuses the mix with
// a ValueError naming both devices, as PyTorch does. Those cases are counted, not failed; every
// other error fails the test.
bool is_device_mix(const std::string& what) {
  return what.find("on cpu") != std::string::npos ||
         what.find("cuda:0 and cpu") != std::string::npos;
}

TEST(CudaGradcheck, EveryCaseOnTheDevice) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible";
  size_t checked = 0, mixed = 0;
  for (const GradCase& c : grad_cases()) {
    SCOPED_TRACE(c.op + " [" + c.label + "] on cuda");
    autograd::GradcheckOptions opt;
    opt.atol = c.atol;
    opt.rtol = c.rtol;
    try {
      EXPECT_EQ(autograd::gradcheck(c.fn, on_device(c.inputs()), opt), "")
          << c.op << " [" << c.label << "] on cuda";
      ++checked;
    } catch (const ValueError& e) {
      if (is_device_mix(e.what())) {
        ++mixed;
        continue;
      }
      ADD_FAILURE() << c.op << " [" << c.label << "] on cuda threw: " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.op << " [" << c.label << "] on cuda threw: " << e.what();
    }
  }
  std::printf("[cuda gradcheck] %zu cases checked on the GPU, %zu build CPU constants inside\n",
              checked, mixed);
  EXPECT_GT(checked, 4 * mixed) << "most cases must run on the device";
}

// A forward that runs part of its work on a side stream: backward runs that node there and must
// order the gradient it hands on (Note [Streams in backward]). Large enough that a missing wait
// would read an unfinished gradient.
TEST(CudaBackward, GradientsCrossStreamsInOrder) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible";
  const int64_t n = int64_t{1} << 24;
  Tensor x_cpu = rand({n}, kFloat32, Generator(3));
  Tensor x = x_cpu.to(kCuda).requires_grad_();
  const Stream side = cuda::stream_from_pool(0);
  Tensor y;
  {
    // The side stream must first see x (made on the default stream).
    Event ready(DeviceType::CUDA);
    ready.record(current_stream(kCuda));
    ready.block(side);
    StreamGuard g(side);
    y = mul(x, 3.0);  // its backward runs on `side`
  }
  Event done(DeviceType::CUDA);
  done.record(side);
  done.block(current_stream(kCuda));
  Tensor loss = sum(mul(y, y));  // d/dx = 18 x
  loss.backward();
  Tensor want = mul(x_cpu, 18.0);
  EXPECT_TRUE(allclose(x.grad().to(kCPU), want, 1e-5, 1e-5));
}

}  // namespace
}  // namespace loom::testing
