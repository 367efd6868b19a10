// An undefined (default-constructed) Tensor: every public method and the free functions taking a
// Tensor throw a typed loom::Error naming the method or operator, never crash. The few methods that
// have a meaning for an undefined tensor (defined, use_count, is_same, impl, str) answer it.
#include <gtest/gtest.h>

#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/dispatch.h"
#include "loom/ops.h"
#include "test_errors.h"

namespace loom {
namespace {

using loom::testing::error_of;

struct Case {
  const char* name;   // what is called
  const char* names;  // what the message must name ("[Tensor::dim]", "[loom::add]")
  std::function<void()> call;
};

const Tensor u;  // undefined
Tensor x() {
  return from_vector<float>({1, 2, 3, 4}, {2, 2});
}

std::vector<Case> method_cases() {
  return {
      {"sizes", "[Tensor::sizes]", [] { (void)u.sizes(); }},
      {"strides", "[Tensor::strides]", [] { (void)u.strides(); }},
      {"shape", "[Tensor::shape]", [] { (void)u.shape(); }},
      {"size", "[Tensor::size]", [] { (void)u.size(0); }},
      {"stride", "[Tensor::stride]", [] { (void)u.stride(0); }},
      {"dim", "[Tensor::dim]", [] { (void)u.dim(); }},
      {"ndim", "[Tensor::ndim]", [] { (void)u.ndim(); }},
      {"numel", "[Tensor::numel]", [] { (void)u.numel(); }},
      {"dtype", "[Tensor::dtype]", [] { (void)u.dtype(); }},
      {"device", "[Tensor::device]", [] { (void)u.device(); }},
      {"is_cpu", "[Tensor::is_cpu]", [] { (void)u.is_cpu(); }},
      {"is_cuda", "[Tensor::is_cuda]", [] { (void)u.is_cuda(); }},
      {"is_meta", "[Tensor::is_meta]", [] { (void)u.is_meta(); }},
      {"is_contiguous", "[Tensor::is_contiguous]", [] { (void)u.is_contiguous(); }},
      {"is_floating_point", "[Tensor::is_floating_point]", [] { (void)u.is_floating_point(); }},
      {"storage_offset", "[Tensor::storage_offset]", [] { (void)u.storage_offset(); }},
      {"element_size", "[Tensor::element_size]", [] { (void)u.element_size(); }},
      {"nbytes", "[Tensor::nbytes]", [] { (void)u.nbytes(); }},
      {"storage", "[Tensor::storage]", [] { (void)u.storage(); }},
      {"key_set", "[Tensor::key_set]", [] { (void)u.key_set(); }},
      {"version", "[Tensor::version]", [] { (void)u.version(); }},
      {"options", "[Tensor::options]", [] { (void)u.options(); }},
      {"data_ptr", "[Tensor::data_ptr]", [] { (void)u.data_ptr(); }},
      {"data_ptr<float>", "[Tensor::data_ptr]", [] { (void)u.data_ptr<float>(); }},
      {"check_dtype_for_access", "[Tensor::data_ptr]", [] { u.check_dtype_for_access(kFloat32); }},
      {"item", "[Tensor::item]", [] { (void)u.item(); }},
      {"item<float>", "[Tensor::item]", [] { (void)u.item<float>(); }},
      {"shape_str", "[Tensor::shape_str]", [] { (void)u.shape_str(); }},
      {"view", "[loom::view]", [] { (void)u.view({4}); }},
      {"reshape", "[loom::reshape]", [] { (void)u.reshape({4}); }},
      {"permute", "[loom::permute]",
       [] {
         (void)u.permute({1, 0});
       }},
      {"transpose", "[loom::transpose]", [] { (void)u.transpose(0, 1); }},
      {"t", "[loom::t]", [] { (void)u.t(); }},
      {"narrow", "[loom::narrow]", [] { (void)u.narrow(0, 0, 1); }},
      {"select", "[loom::select]", [] { (void)u.select(0, 0); }},
      {"slice", "[loom::slice]", [] { (void)u.slice(0, 0, 1); }},
      {"expand", "[loom::expand]",
       [] {
         (void)u.expand({2, 2});
       }},
      {"expand_as (self)", "[Tensor::expand_as]", [] { (void)u.expand_as(x()); }},
      {"expand_as (other)", "[Tensor::expand_as]", [] { (void)x().expand_as(u); }},
      {"squeeze", "[loom::squeeze]", [] { (void)u.squeeze(); }},
      {"unsqueeze", "[loom::unsqueeze]", [] { (void)u.unsqueeze(0); }},
      {"flatten", "[loom::flatten]", [] { (void)u.flatten(); }},
      {"contiguous", "[loom::contiguous]", [] { (void)u.contiguous(); }},
      {"operator[]", "[loom::select]", [] { (void)u[0]; }},
      {"clone", "[loom::clone]", [] { (void)u.clone(); }},
      {"to(DType)", "[loom::to]", [] { (void)u.to(kFloat64); }},
      {"to(Device)", "[loom::to]", [] { (void)u.to(kCPU); }},
      {"to(TensorOptions)", "[loom::to]", [] { (void)u.to(TensorOptions(kFloat64)); }},
      {"copy_ (self)", "[loom::copy_]", [] { (void)u.copy_(x()); }},
      {"copy_ (src)", "[loom::copy_]", [] { (void)x().copy_(u); }},
      {"fill_", "[loom::fill_]", [] { (void)u.fill_(1); }},
      {"zero_", "[loom::zero_]", [] { (void)u.zero_(); }},
      {"add", "[loom::add]", [] { (void)u.add(x()); }},
      {"add (other)", "[loom::add]", [] { (void)x().add(u); }},
      {"sub", "[loom::sub]", [] { (void)u.sub(x()); }},
      {"mul", "[loom::mul]", [] { (void)u.mul(x()); }},
      {"div", "[loom::div]", [] { (void)u.div(x()); }},
      {"add_", "[loom::add_]", [] { (void)u.add_(x()); }},
      {"sub_", "[loom::sub_]", [] { (void)u.sub_(x()); }},
      {"mul_(Tensor)", "[loom::mul_]", [] { (void)u.mul_(x()); }},
      {"div_", "[loom::div_]", [] { (void)u.div_(x()); }},
      {"mul_(Scalar)", "[loom::mul_]", [] { (void)u.mul_(Scalar(2)); }},
      {"neg", "[loom::neg]", [] { (void)u.neg(); }},
      {"exp", "[loom::exp]", [] { (void)u.exp(); }},
      {"log", "[loom::log]", [] { (void)u.log(); }},
      {"sqrt", "[loom::sqrt]", [] { (void)u.sqrt(); }},
      {"abs", "[loom::abs]", [] { (void)u.abs(); }},
      {"relu", "[loom::relu]", [] { (void)u.relu(); }},
      {"sum()", "[loom::sum]", [] { (void)u.sum(); }},
      {"sum(dim)", "[loom::sum]", [] { (void)u.sum({0}); }},
      {"mean()", "[loom::mean]", [] { (void)u.mean(); }},
      {"mean(dim)", "[loom::mean]", [] { (void)u.mean({0}); }},
      {"argmax", "[loom::argmax]", [] { (void)u.argmax(); }},
      {"matmul", "[loom::matmul]", [] { (void)u.matmul(x()); }},
      {"requires_grad", "[Tensor::requires_grad]", [] { (void)u.requires_grad(); }},
      {"requires_grad_", "[Tensor::requires_grad_]", [] { (void)u.requires_grad_(); }},
      {"is_leaf", "[Tensor::is_leaf]", [] { (void)u.is_leaf(); }},
      {"grad", "[Tensor::grad]", [] { (void)u.grad(); }},
      {"backward", "[Tensor::backward]", [] { u.backward(); }},
      {"detach", "[Tensor::detach]", [] { (void)u.detach(); }},
      {"retain_grad", "[Tensor::retain_grad]", [] { u.retain_grad(); }},
  };
}

std::vector<Case> function_cases() {
  return {
      {"to", "[loom::to]", [] { (void)loom::to(u, kFloat32); }},
      {"to (copy)", "[loom::to]", [] { (void)loom::to(u, kFloat32, true); }},
      {"add", "[loom::add]", [] { (void)add(u, x()); }},
      {"add (Scalar)", "[loom::add]", [] { (void)add(u, Scalar(1)); }},
      {"operator+", "[loom::add]", [] { (void)(x() + u); }},
      {"add_out (out)", "[loom::add]", [] { (void)add_out(u, x(), x()); }},
      {"matmul", "[loom::matmul]", [] { (void)matmul(x(), u); }},
      {"mm", "[loom::mm]", [] { (void)mm(u, x()); }},
      {"sum", "[loom::sum]", [] { (void)sum(u); }},
      {"cat", "[loom::cat]",
       [] {
         (void)cat({x(), u});
       }},
      {"stack", "[loom::stack]", [] { (void)stack({u}); }},
      {"split", "[loom::split]", [] { (void)split(u, 1); }},
      {"chunk", "[loom::chunk]", [] { (void)chunk(u, 2); }},
      {"unbind", "[loom::unbind]", [] { (void)unbind(u); }},
      {"where", "[loom::where]", [] { (void)where(u, x(), x()); }},
      {"softmax", "[loom::softmax]", [] { (void)softmax(u, 0); }},
      {"linear (weight)", "[loom::linear]", [] { (void)linear(x(), u); }},
      {"cross_entropy", "[loom::cross_entropy]", [] { (void)cross_entropy(u, x()); }},
      {"index_select", "[loom::index_select]", [] { (void)index_select(x(), 0, u); }},
      {"empty_like", "[loom::empty_like]", [] { (void)empty_like(u); }},
      {"zeros_like", "[loom::zeros_like]", [] { (void)zeros_like(u); }},
      {"ones_like", "[loom::ones_like]", [] { (void)ones_like(u); }},
      {"full_like", "[loom::full_like]", [] { (void)full_like(u, 1); }},
      {"rand_like", "[loom::rand_like]", [] { (void)rand_like(u); }},
      {"randn_like", "[loom::randn_like]", [] { (void)randn_like(u); }},
      {"broadcast_to", "[loom::expand]", [] { (void)broadcast_to(u, {2}); }},
      {"allclose", "[loom::allclose]", [] { (void)allclose(u, x()); }},
      {"equal", "[loom::equal]", [] { (void)equal(x(), u); }},
      {"to_vector", "[to_vector]", [] { (void)to_vector<float>(u); }},
      {"item", "[Tensor::item]", [] { (void)u.item<double>(); }},
      {"autograd::backward", "[autograd] output 0", [] { autograd::backward({u}); }},
      {"backward (gradient of another shape is fine, self undefined)", "[Tensor::backward]",
       [] { u.backward(x()); }},
  };
}

void expect_all_throw(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string msg = error_of<ValueError>(c.call);
    EXPECT_CONTAINS(msg, c.names);
    EXPECT_CONTAINS(msg, "undefined tensor");
  }
}

TEST(UndefinedTensor, EveryMethodThrowsAValueErrorNamingIt) {
  expect_all_throw(method_cases());
}

TEST(UndefinedTensor, EveryFreeFunctionThrowsAValueErrorNamingTheOperator) {
  expect_all_throw(function_cases());
}

TEST(UndefinedTensor, TheMessageSaysWhatAnUndefinedTensorIs) {
  EXPECT_EQ(
      error_of<ValueError>([] { (void)loom::to(u, kFloat32); }),
      "[loom::to] called on an undefined tensor (a default-constructed Tensor holds no data)");
  EXPECT_EQ(error_of<ValueError>([] { (void)u.dim(); }),
            "[Tensor::dim] called on an undefined tensor (a default-constructed Tensor holds no "
            "data)");
  // A dispatched operator names the argument.
  EXPECT_CONTAINS(error_of<ValueError>([] { (void)add(x(), u); }),
                  "[loom::add] argument 'other' is an undefined tensor");
  EXPECT_CONTAINS(error_of<ValueError>([] {
                    (void)cat({x(), u});
                  }),
                  "[loom::cat] argument 'tensors' element 1 is an undefined tensor");
}

TEST(UndefinedTensor, QueriesThatHaveAnAnswerAnswerIt) {
  EXPECT_FALSE(u.defined());
  EXPECT_EQ(u.use_count(), 0);
  EXPECT_EQ(u.impl(), nullptr);
  EXPECT_TRUE(u.is_same(Tensor()));
  EXPECT_FALSE(u.is_same(x()));
  EXPECT_EQ(u.str(), "tensor(undefined)");
  std::ostringstream os;
  os << u;
  EXPECT_EQ(os.str(), "tensor(undefined)");
}

TEST(UndefinedTensor, AnOptionalTensorArgumentMayBeUndefined) {
  // Tensor? arguments: an undefined tensor means "none", as in PyTorch.
  Tensor in = x(), w = from_vector<float>({1, 0, 0, 1}, {2, 2});
  EXPECT_TRUE(allclose(linear(in, w, Tensor()), linear(in, w)));
}

TEST(UndefinedTensor, TheBoxedCallNamesTheArgumentToo) {
  OperatorHandle op = Dispatcher::singleton().find_or_throw("loom::neg");
  Stack stack{IValue(Tensor())};
  EXPECT_CONTAINS(error_of<ValueError>([&] { op.call_boxed(stack); }),
                  "[loom::neg] argument 'self' is an undefined tensor");
}

}  // namespace
}  // namespace loom
