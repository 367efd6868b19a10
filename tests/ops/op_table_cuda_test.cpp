// The operator table on the GPU: every OpCase runs with its inputs on cuda:0 (contiguous and
// strided), its outputs must be CUDA tensors, and they must match the same float64 reference as the
// CPU run. ctest runs these as `cuda_op_table` (label cuda); without a GPU they skip.
#include <gtest/gtest.h>

#include "loom/cuda.h"
#include "ops/op_table.h"

namespace loom::testing {
namespace {

const Device kCuda(DeviceType::CUDA, 0);

std::vector<Tensor> to_device(const std::vector<Tensor>& in, Device d) {
  std::vector<Tensor> out;
  for (const Tensor& t : in) out.push_back(t.to(d));
  return out;
}

void expect_on_cuda(const OpCase& c, const std::vector<Tensor>& out, const std::string& variant) {
  for (size_t o = 0; o < out.size(); ++o) {
    if (!out[o].defined()) continue;
    EXPECT_TRUE(out[o].is_cuda()) << c.name << " [" << variant << "] output " << o << " is on "
                                  << out[o].device();
  }
}

class CudaOpTable : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOpTable, MatchesReference) {
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device is visible";
  const OpCase& c = op_cases()[GetParam()];
  uint32_t seed = 1234;
  for (DType dt : c.dtypes) {
    SCOPED_TRACE(c.name + " dtype=" + dtype_name(dt) + " on cuda");
    std::vector<Tensor> in = random_inputs(c, dt, seed++);
    std::vector<Ref> refs;
    for (const Tensor& t : in) refs.push_back(Ref::of(t));
    const std::vector<Ref> want = c.ref(refs);
    std::vector<Tensor> got = c.run(to_device(in, kCuda));
    expect_on_cuda(c, got, "contiguous");
    compare(c, got, want, dt, "cuda contiguous");
    if (c.noncontiguous) {
      // Every other element of a buffer twice as wide, on the device.
      std::vector<Tensor> nc = to_device(in, kCuda);
      for (size_t i = 0; i < nc.size(); ++i) {
        const Tensor& t = in[i];
        if (t.dim() == 0 || t.numel() == 0) continue;
        std::vector<int64_t> big = t.sizes().vec();
        big.back() *= 2;
        Tensor storage = zeros(big, TensorOptions(t.dtype()).with_device(kCuda));
        Tensor view = storage.slice(-1, 0, std::nullopt, 2);
        view.copy_(t);
        nc[i] = view;
      }
      std::vector<Tensor> out = c.run(nc);
      expect_on_cuda(c, out, "non-contiguous");
      compare(c, out, want, dt, "cuda non-contiguous");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, CudaOpTable, ::testing::Range<size_t>(0, op_cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& info) {
                           std::string n = op_cases()[info.param].name;
                           for (auto& ch : n) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return n;
                         });

}  // namespace
}  // namespace loom::testing
