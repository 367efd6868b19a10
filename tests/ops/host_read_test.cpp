// Host reads go through the dispatcher (Note [Host reads] in src/ops/host_read.cpp): item() calls
// _local_scalar_dense, to_vector() and printing copy another device's tensor with _to_copy. A
// stand-in CUDA backend (host memory labelled cuda:0, kernels registered for the CUDA key by a
// Library that undoes them) shows that each read reaches the backend's kernel.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "loom/cuda.h"
#include "loom/dispatch.h"
#include "loom/error.h"
#include "loom/memory.h"
#include "loom/ops.h"
#include "loom/tensor.h"
#include "test_errors.h"

namespace loom {
namespace {

using testing::error_of;

int g_item_calls = 0;
int g_copy_calls = 0;

void host_free(void* ctx) {
  std::free(ctx);
}

// Host memory that tensors see as cuda:0.
class HostMemoryAsCuda final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes) override {
    void* p = std::malloc(nbytes == 0 ? 1 : nbytes);
    return DataPtr(p, p, &host_free, cuda_device(0));
  }
};

Scalar cuda_local_scalar_dense(const Tensor& self) {
  ++g_item_calls;
  EXPECT_EQ(self.dtype(), kFloat32);
  return Scalar(static_cast<double>(*static_cast<const float*>(self.data_ptr())));
}

Tensor cuda_to_copy(const Tensor& self, std::optional<DType> dtype, std::optional<Device> device) {
  ++g_copy_calls;
  EXPECT_TRUE(self.is_contiguous());
  EXPECT_EQ(dtype.value_or(self.dtype()), self.dtype());
  Tensor out = empty_tensor(self.sizes(), self.dtype(), device.value_or(self.device()));
  EXPECT_TRUE(out.is_cpu());
  std::memcpy(out.data_ptr(), self.data_ptr(), self.nbytes());
  return out;
}

class HostReads : public ::testing::Test {
 protected:
  void SetUp() override {
    set_allocator(cuda_device(0), &memory_);
    g_item_calls = g_copy_calls = 0;
  }
  void TearDown() override { set_allocator(cuda_device(0), nullptr); }

  Tensor cuda_tensor(const std::vector<float>& values) {
    Tensor t = empty_tensor({static_cast<int64_t>(values.size())}, kFloat32, cuda_device(0));
    std::memcpy(t.data_ptr(), values.data(), values.size() * sizeof(float));
    return t;
  }

  HostMemoryAsCuda memory_;
};

// These tests stand in for a CUDA backend with host memory and kernels of their own; a build with
// the real backend has its kernels registered already (tests/cuda/cuda_copy_test.cpp checks them on
// a GPU).
#define SKIP_WITH_CUDA_BACKEND() \
  if (cuda::is_built()) GTEST_SKIP() << "the CUDA backend's own kernels are registered"

TEST_F(HostReads, ItemToVectorAndPrintingCallTheBackendsKernels) {
  SKIP_WITH_CUDA_BACKEND();
  Library lib(Library::Kind::Impl, "loom", DispatchKey::CUDA, __FILE__, __LINE__);
  lib.impl("_local_scalar_dense", cuda_local_scalar_dense);
  lib.impl("_to_copy", cuda_to_copy);
  const Tensor x = cuda_tensor({1.5f, 2.0f, -3.0f});
  ASSERT_EQ(x.device(), cuda_device(0));

  EXPECT_EQ(to_vector<float>(x), (std::vector<float>{1.5f, 2.0f, -3.0f}));
  EXPECT_EQ(g_copy_calls, 1);
  EXPECT_EQ(x.str(), "tensor([ 1.5000,  2.0000, -3.0000], device='cuda:0')");
  EXPECT_EQ(g_copy_calls, 2);
  EXPECT_EQ(g_item_calls, 0);

  const Tensor one = cuda_tensor({-7.25f});
  EXPECT_EQ(one.item<double>(), -7.25);
  EXPECT_EQ(one.item().to_double(), -7.25);
  EXPECT_EQ(g_item_calls, 2);
  EXPECT_CONTAINS(error_of<ValueError>([&] { x.item(); }), "[item] a tensor with 3 elements");
  EXPECT_EQ(g_item_calls, 2);

  // CPU tensors: item() dispatches to the CPU kernel; to_vector() and printing read in place.
  const Tensor c = from_vector<float>({4.0f});
  EXPECT_EQ(c.item<float>(), 4.0f);
  EXPECT_EQ(to_vector<float>(c), std::vector<float>{4.0f});
  EXPECT_EQ(c.str(), "tensor([4.])");
  EXPECT_EQ(g_item_calls, 2);
  EXPECT_EQ(g_copy_calls, 2);
}

TEST_F(HostReads, WithoutAKernelTheReadNamesTheOperatorAndDevice) {
  SKIP_WITH_CUDA_BACKEND();
  const Tensor x = cuda_tensor({1.0f});
  EXPECT_CONTAINS(error_of<NotImplementedError>([&] { x.item(); }),
                  "[loom::_local_scalar_dense] no kernel for dispatch key CUDA");
  EXPECT_CONTAINS(error_of<Error>([&] { to_vector<float>(x); }), "_to_copy");
  EXPECT_CONTAINS(error_of<Error>([&] { (void)x.str(); }), "_to_copy");
}

TEST(HostReadsMeta, ItemAndToVectorOfAMetaTensorNameTheOperator) {
  const Tensor m = empty({1}, TensorOptions().with_device(kMeta));
  EXPECT_CONTAINS(error_of<NotImplementedError>([&] { m.item(); }),
                  "[_local_scalar_dense] a meta tensor (shape [1]) has no value to read");
  EXPECT_CONTAINS(error_of<ValueError>([&] { to_vector<float>(m); }), "[_to_copy] a meta tensor");
  EXPECT_EQ(m.str(), "tensor(..., device='meta', size=[1])");
}

TEST(HostReadsAutograd, ItemOfATensorThatRequiresGrad) {
  const Tensor w = from_vector<float>({3.0f}).requires_grad_();
  const Tensor y = mul(w, w);
  EXPECT_EQ(y.item<float>(), 9.0f);
  EXPECT_EQ(w.item<float>(), 3.0f);
}

}  // namespace
}  // namespace loom
