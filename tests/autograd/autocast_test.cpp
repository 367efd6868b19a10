// Autocast (loom/autocast.h) on the CPU in bfloat16: each listed operator against the same
// computation with the casts written out by hand outside the guard (bit for bit), gradients of
// float32 parameters against that explicit-cast reference, the cast cache counted through a
// RecordFunction observer, nesting, threads and errors.
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>

#include "loom/autocast.h"
#include "loom/autograd.h"
#include "loom/dispatch.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/record_function.h"
#include "test_errors.h"

namespace loom::testing {
namespace {

Tensor rnd(IntArrayRef sizes, uint64_t seed, DType dt = kFloat32) {
  return randn(sizes, TensorOptions(kFloat32), Generator(seed)).to(dt);
}

// Counts the casts of float32 tensors (_to_copy calls) made while it lives. (The CPU's bfloat16
// matrix products compute in float32, so their kernels cast bfloat16 operands up: not counted.)
class CastCounter {
 public:
  CastCounter() {
    handle_ = add_record_callbacks(RecordFunctionCallbacks{
        [this](OpEvent& ev) {
          if (ev.kind == OpEvent::Kind::Operator && ev.name == "loom::_to_copy" &&
              !ev.input_dtypes.empty() && ev.input_dtypes[0] == kFloat32) {
            ++casts_;
          }
        },
        nullptr, true, false});
  }
  ~CastCounter() { remove_record_callbacks(handle_); }
  int casts() const { return casts_.load(); }

 private:
  uint64_t handle_ = 0;
  std::atomic<int> casts_{0};
};

TEST(Autocast, StateOutsideAndInsideTheGuard) {
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(autocast_dtype(DeviceType::CPU), kBFloat16);
  {
    AutocastGuard g(DeviceType::CPU);
    EXPECT_TRUE(autocast_enabled(DeviceType::CPU));
    EXPECT_FALSE(autocast_enabled(DeviceType::CUDA));
    EXPECT_FALSE(autocast_enabled(DeviceType::Meta));
    EXPECT_EQ(autocast_dtype(DeviceType::CPU), kBFloat16);
  }
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
}

TEST(Autocast, LinearRunsInBfloat16LikeTheExplicitCast) {
  nn::Linear lin(16, 8, true);
  const Tensor x = rnd({4, 16}, 1);
  Tensor y;
  {
    AutocastGuard g(DeviceType::CPU);
    y = lin.forward(x);
  }
  EXPECT_EQ(y.dtype(), kBFloat16);
  const Tensor ref = linear(x.to(kBFloat16), lin.weight().to(kBFloat16), lin.bias().to(kBFloat16));
  EXPECT_TRUE(equal(y, ref));
  // Outside the guard nothing changes.
  const Tensor y32 = lin.forward(x);
  EXPECT_EQ(y32.dtype(), kFloat32);
  // A 3-D input through matmul (CompositeImplicit, decomposing into mm): cast once, at the top.
  const Tensor x3 = rnd({2, 3, 16}, 2), w = rnd({16, 5}, 3);
  CastCounter counter;
  Tensor z;
  {
    AutocastGuard g(DeviceType::CPU);
    z = matmul(x3, w);
  }
  EXPECT_EQ(counter.casts(), 2);
  EXPECT_EQ(z.dtype(), kBFloat16);
  EXPECT_TRUE(equal(z, matmul(x3.to(kBFloat16), w.to(kBFloat16))));
}

TEST(Autocast, LowerPrecisionOperators) {
  const Tensor a = rnd({3, 4}, 4), b = rnd({4, 5}, 5), c = rnd({3, 5}, 6);
  const Tensor ba = rnd({2, 3, 4}, 7), bb = rnd({2, 4, 5}, 8);
  const Tensor img = rnd({1, 2, 6, 6}, 9), k = rnd({3, 2, 3, 3}, 10), kb = rnd({3}, 11);
  AutocastGuard g(DeviceType::CPU);
  Tensor r = mm(a, b);
  EXPECT_EQ(r.dtype(), kBFloat16);
  EXPECT_TRUE(equal(r, mm(a.to(kBFloat16), b.to(kBFloat16))));
  r = bmm(ba, bb);
  EXPECT_EQ(r.dtype(), kBFloat16);
  EXPECT_TRUE(equal(r, bmm(ba.to(kBFloat16), bb.to(kBFloat16))));
  r = addmm(c, a, b);
  EXPECT_EQ(r.dtype(), kBFloat16);
  EXPECT_TRUE(equal(r, addmm(c.to(kBFloat16), a.to(kBFloat16), b.to(kBFloat16))));
  r = conv2d(img, k, kb);
  EXPECT_EQ(r.dtype(), kBFloat16);
  EXPECT_TRUE(equal(r, conv2d(img.to(kBFloat16), k.to(kBFloat16), kb.to(kBFloat16))));
  // float64 is never lowered; integers are never cast.
  EXPECT_EQ(mm(a.to(kFloat64), b.to(kFloat64)).dtype(), kFloat64);
  EXPECT_EQ(mm(ones({2, 2}, kInt64), ones({2, 2}, kInt64)).dtype(), kInt64);
}

TEST(Autocast, Float32OperatorsOnBfloat16Inputs) {
  const Tensor x = rnd({4, 6}, 12, kBFloat16);
  const Tensor w = rnd({6}, 13), b = rnd({6}, 14);
  const Tensor x32 = x.to(kFloat32);
  AutocastGuard g(DeviceType::CPU);
  Tensor r = softmax(x, 1);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(allclose(r, softmax(x32, 1), 1e-6, 1e-7));
  r = log_softmax(x, 1);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(allclose(r, log_softmax(x32, 1), 1e-6, 1e-6));
  // A dtype the caller chose wins.
  EXPECT_EQ(softmax(x, 1, kBFloat16).dtype(), kBFloat16);
  // layer_norm with float32 affine parameters: all of it in float32.
  r = layer_norm(x, {6}, w.to(kBFloat16), b);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(equal(r, layer_norm(x32, {6}, w.to(kBFloat16).to(kFloat32), b)));
  r = sum(x);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(allclose(r, sum(x32), 1e-6, 1e-6));
  r = exp(x);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(equal(r, exp(x32)));
  const Tensor target = from_vector<int64_t>({0, 5, 2, 3});
  r = cross_entropy(x, target);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(equal(r, cross_entropy(x32, target)));
  {
    // The fused kernel reads the bf16 logits as they are: no float32 copy is recorded, and their
    // gradient comes back in bf16.
    const Tensor xg = x.detach().clone().requires_grad_();
    const Tensor loss = cross_entropy(xg, target);
    EXPECT_EQ(loss.dtype(), kFloat32);
    EXPECT_TRUE(equal(loss, cross_entropy(x32, target)));
    const std::string graph = autograd::describe_graph(loss);
    EXPECT_NE(graph.find("_fused_cross_entropy"), std::string::npos) << graph;
    EXPECT_EQ(graph.find("_to_copy"), std::string::npos) << graph;
    loss.backward();
    EXPECT_EQ(xg.grad().dtype(), kBFloat16);
  }
  r = pow(x, 2);
  EXPECT_EQ(r.dtype(), kFloat32);
  EXPECT_TRUE(equal(r, pow(x32, 2)));
}

TEST(Autocast, PromoteOperatorsWidenToTheWidestFloatingArgument) {
  const Tensor a = rnd({2, 3}, 15), b = rnd({2, 3}, 16, kBFloat16);
  {
    AutocastGuard g(DeviceType::CPU);
    Tensor r = cat({a, b});
    EXPECT_EQ(r.dtype(), kFloat32);
    EXPECT_TRUE(equal(r, cat({a, b.to(kFloat32)})));
    r = stack({b, a});
    EXPECT_EQ(r.dtype(), kFloat32);
    EXPECT_TRUE(equal(r, stack({b.to(kFloat32), a})));
    const Tensor cond = gt(a, 0);
    r = where(cond, b, a);
    EXPECT_EQ(r.dtype(), kFloat32);
    EXPECT_TRUE(equal(r, where(cond, b.to(kFloat32), a)));
    // All bfloat16: stays bfloat16.
    EXPECT_EQ(cat({b, b}).dtype(), kBFloat16);
  }
}

TEST(Autocast, NestingAndDisabling) {
  const Tensor a = rnd({3, 4}, 17), b = rnd({4, 2}, 18);
  AutocastGuard outer(DeviceType::CPU);
  EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
  {
    AutocastGuard off(DeviceType::CPU, kBFloat16, false);
    EXPECT_FALSE(autocast_enabled(DeviceType::CPU));
    EXPECT_EQ(mm(a, b).dtype(), kFloat32);
    {
      AutocastGuard half(DeviceType::CPU, kFloat16);
      EXPECT_EQ(autocast_dtype(DeviceType::CPU), kFloat16);
      const Tensor r = mm(a, b);
      EXPECT_EQ(r.dtype(), kFloat16);
      EXPECT_TRUE(equal(r, mm(a.to(kFloat16), b.to(kFloat16))));
    }
    EXPECT_EQ(autocast_dtype(DeviceType::CPU), kBFloat16);
    EXPECT_EQ(mm(a, b).dtype(), kFloat32);
  }
  EXPECT_TRUE(autocast_enabled(DeviceType::CPU));
  EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
  // A guard for CUDA leaves CPU tensors alone.
  AutocastGuard off(DeviceType::CPU, kBFloat16, false);
  AutocastGuard cuda(DeviceType::CUDA, kFloat16);
  EXPECT_EQ(mm(a, b).dtype(), kFloat32);
}

TEST(Autocast, StateIsPerThread) {
  const Tensor a = rnd({3, 4}, 19), b = rnd({4, 2}, 20);
  AutocastGuard g(DeviceType::CPU);
  DType other = kBool;
  bool enabled_there = true;
  std::thread t([&] {
    enabled_there = autocast_enabled(DeviceType::CPU);
    other = mm(a, b).dtype();
  });
  t.join();
  EXPECT_FALSE(enabled_there);
  EXPECT_EQ(other, kFloat32);
  EXPECT_EQ(mm(a, b).dtype(), kBFloat16);
}

TEST(Autocast, Float32ParametersGetFloat32GradientsEqualToTheExplicitCast) {
  nn::Linear lin(8, 4, true);
  const Tensor x = rnd({5, 8}, 21), mix = rnd({5, 4}, 22);
  Tensor loss;
  {
    AutocastGuard g(DeviceType::CPU);
    loss = sum(softmax(lin.forward(x), 1) * mix);  // the product in bf16, softmax in float32
    EXPECT_EQ(loss.dtype(), kFloat32);
  }
  loss.backward();  // outside the guard, as PyTorch recommends
  // The reference writes the casts out: x, W and b to bfloat16, softmax computing in float32.
  const Tensor w = lin.weight().detach().clone().requires_grad_();
  const Tensor b = lin.bias().detach().clone().requires_grad_();
  const Tensor h = linear(x.to(kBFloat16), w.to(kBFloat16), b.to(kBFloat16));
  sum(softmax(h, 1, kFloat32) * mix).backward();
  ASSERT_TRUE(lin.weight().grad().defined());
  EXPECT_EQ(lin.weight().grad().dtype(), kFloat32);
  EXPECT_EQ(lin.bias().grad().dtype(), kFloat32);
  EXPECT_TRUE(equal(lin.weight().grad(), w.grad()));
  EXPECT_TRUE(equal(lin.bias().grad(), b.grad()));
  // A backward inside the guard autocasts the backward's listed operators too; the gradients
  // still arrive in float32, close to the reference.
  lin.zero_grad();
  {
    AutocastGuard g(DeviceType::CPU);
    sum(softmax(lin.forward(x), 1) * mix).backward();
  }
  EXPECT_EQ(lin.weight().grad().dtype(), kFloat32);
  EXPECT_TRUE(allclose(lin.weight().grad(), w.grad(), 1e-2, 1e-3));
}

TEST(Autocast, ACachedParameterIsCastOnce) {
  const Tensor w = rnd({6, 6}, 23).requires_grad_();
  const Tensor x1 = rnd({2, 6}, 24), x2 = rnd({3, 6}, 25);
  CastCounter counter;
  Tensor y1, y2;
  {
    AutocastGuard g(DeviceType::CPU);
    y1 = mm(x1, w);
    y2 = mm(x2, w);
    // x1, x2 and w: three casts, not four.
    EXPECT_EQ(counter.casts(), 3);
    EXPECT_EQ(autocast_cached_casts(), 1u);
    {
      AutocastGuard inner(DeviceType::CPU);  // nested guards share the cache
      const Tensor y3 = mm(x1, w);
      EXPECT_EQ(counter.casts(), 4);
    }
    EXPECT_EQ(autocast_cached_casts(), 1u);
    // An in-place update of the parameter inside the guard invalidates its copy.
    {
      autograd::NoGradGuard no_grad;
      add_(w, 1.0);
    }
    const Tensor y4 = mm(x1, w);
    EXPECT_EQ(counter.casts(), 6);
    EXPECT_TRUE(equal(y4, mm(x1.to(kBFloat16), w.detach().to(kBFloat16))));
  }
  EXPECT_EQ(autocast_cached_casts(), 0u);  // dropped with the outermost guard
  (y1.sum() + y2.sum()).to(kFloat32).backward();
  // Both uses reach the float32 parameter through the one cached copy: dL/dW = x1^T 1 + x2^T 1.
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), kFloat32);
  const Tensor g1 = mm(x1.to(kBFloat16).t(), ones({2, 6}, kBFloat16)).to(kFloat32);
  const Tensor g2 = mm(x2.to(kBFloat16).t(), ones({3, 6}, kBFloat16)).to(kFloat32);
  EXPECT_TRUE(allclose(w.grad(), g1 + g2, 1e-2, 1e-2));
}

TEST(Autocast, ACopyMadeWithoutGradIsNotReusedWithGrad) {
  const Tensor w = rnd({4, 4}, 26).requires_grad_();
  const Tensor x = rnd({2, 4}, 27);
  AutocastGuard g(DeviceType::CPU);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_FALSE(mm(x, w).requires_grad());
  }
  const Tensor y = mm(x, w);
  EXPECT_TRUE(y.requires_grad());
  y.sum().backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_TRUE(equal(w.grad(), mm(x.to(kBFloat16).t(), ones({2, 4}, kBFloat16)).to(kFloat32)));
}

TEST(Autocast, RefusesDtypesThatAreNotLowerPrecision) {
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBool}) {
    const std::string msg = error_of<ValueError>([&] { AutocastGuard g(DeviceType::CPU, dt); });
    EXPECT_CONTAINS(msg, "[autocast]");
    EXPECT_CONTAINS(msg, "bfloat16 or float16");
  }
  EXPECT_CONTAINS(error_of<ValueError>([] { AutocastGuard g(DeviceType::Meta); }), "meta");
  EXPECT_FALSE(autocast_enabled(DeviceType::CPU));  // a refused guard changed nothing
}

TEST(Autocast, PolicyLookup) {
  EXPECT_EQ(autocast_policy("loom::mm"), CastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy("mm"), CastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy("loom::linear"), CastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy("loom::scaled_dot_product_attention"), CastPolicy::LowerPrecision);
  EXPECT_EQ(autocast_policy("loom::softmax"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("loom::pow"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("loom::pow.Tensor_Scalar"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("loom::cat"), CastPolicy::Promote);
  EXPECT_EQ(autocast_policy("loom::add"), CastPolicy::None);
  EXPECT_EQ(autocast_policy("loom::exp.out"), CastPolicy::None);
  EXPECT_EQ(autocast_policy("loom::exp_"), CastPolicy::None);
  EXPECT_EQ(autocast_policy("loom::no_such_op"), CastPolicy::None);
  EXPECT_STREQ(cast_policy_name(CastPolicy::LowerPrecision), "lower precision");
  EXPECT_STREQ(cast_policy_name(CastPolicy::Float32), "float32");
  EXPECT_STREQ(cast_policy_name(CastPolicy::Promote), "promote");
  EXPECT_STREQ(cast_policy_name(CastPolicy::None), "none");
}

// The table and the registered operators agree: every overload of a listed operator that does not
// write its arguments has the Autocast kernel (a new overload that is not listed fails here), and
// no out= or in-place overload has it; unlisted operators fall through.
TEST(Autocast, EveryListedOverloadHasTheKernel) {
  int listed = 0;
  for (const OperatorHandle& op : Dispatcher::singleton().all_operators()) {
    const FunctionSchema& s = op.schema();
    const std::string base = s.ns + "::" + s.name;
    const bool has = op.has_kernel(DispatchKey::Autocast);
    if (s.ns != "loom") continue;
    if (s.is_mutable()) {
      EXPECT_FALSE(has) << op.name() << " writes its arguments but has an Autocast kernel";
      EXPECT_EQ(autocast_policy(op.name()), CastPolicy::None) << op.name();
    } else if (autocast_policy(base) != CastPolicy::None) {
      EXPECT_TRUE(has) << op.name() << " is an overload of a listed operator without the kernel";
      EXPECT_EQ(autocast_policy(op.name()), autocast_policy(base)) << op.name();
      ++listed;
    } else {
      EXPECT_FALSE(has) << op.name();
      EXPECT_EQ(op.kernel_source(DispatchKey::Autocast), "fallthrough") << op.name();
    }
  }
  EXPECT_GT(listed, 25);
}

}  // namespace
}  // namespace loom::testing
