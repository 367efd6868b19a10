// A leaf owns its AccumulateGrad node and edges to that node hold the leaf (Note [Leaf owns its
// AccumulateGrad] in src/autograd/variable.cpp): the node is made once per leaf, a graph keeps its
// leaves alive, and a node that outlives its leaf drops the gradients it gets.
#include <gtest/gtest.h>

#include "loom/autograd.h"
#include "loom/ops.h"

namespace loom {
namespace {

using autograd::NoGradGuard;

Tensor leaf(std::vector<double> v) {
  const auto n = static_cast<int64_t>(v.size());
  return from_vector(v, {n}).requires_grad_();
}

std::vector<double> vec(const Tensor& t) {
  return to_vector<double>(t);
}

TEST(LeafOwnership, AccumulateGradIsMadeOncePerLeaf) {
  Tensor x = leaf({1, 2});
  autograd::Node* first = autograd::gradient_edge(x).fn.get();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name(), "AccumulateGrad");
  { Tensor y = add(x, x); }  // a graph through x comes and goes
  EXPECT_EQ(autograd::gradient_edge(x).fn.get(), first);
  // Recording one operation on leaves that already have their node makes exactly one node.
  const uint64_t before = autograd::peek_sequence_nr();
  Tensor z = mul(x, x);
  EXPECT_EQ(autograd::peek_sequence_nr(), before + 1);
  z.sum().backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{2, 4}));
}

TEST(LeafOwnership, AGraphKeepsADroppedLeafAliveAndItsHooksRun) {
  int calls = 0;
  Tensor seen;
  Tensor out;
  {
    Tensor x = leaf({1, 2, 3});
    autograd::register_post_accumulate_grad_hook(x, [&](const Tensor& l) {
      ++calls;
      seen = l.grad();
    });
    out = sum(mul(x, x));
  }  // the user no longer holds x; the graph does
  out.backward();
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(seen.defined());
  EXPECT_EQ(vec(seen), (std::vector<double>{2, 4, 6}));
}

TEST(LeafOwnership, ANodeThatOutlivesItsLeafDropsItsGradients) {
  std::shared_ptr<autograd::Node> acc;
  {
    Tensor x = leaf({1, 2});
    acc = autograd::gradient_edge(x).fn;  // held outside any edge: does not keep x alive
  }
  ASSERT_NE(acc, nullptr);
  std::vector<Tensor> grads{from_vector<double>({1, 1})};
  EXPECT_TRUE(acc->apply(std::move(grads)).empty());
}

TEST(LeafOwnership, ALeafResizedUnderNoGradGetsGradientsOfItsNewShape) {
  Tensor x = leaf({1, 2});
  sum(x).backward();  // x's node records shape [2]
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{1, 1}));
  {
    NoGradGuard no_grad;
    add_out(x, from_vector<double>({1, 2, 3}), from_vector<double>({1, 1, 1}));  // resizes x to [3]
  }
  ASSERT_EQ(x.numel(), 3);
  autograd::set_grad(x, Tensor());
  mul(x, 2.0).sum().backward();
  EXPECT_EQ(vec(x.grad()), (std::vector<double>{2, 2, 2}));
}

}  // namespace
}  // namespace loom
