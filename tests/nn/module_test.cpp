// Module base: registration, naming, traversal, train/eval, zero_grad, to(dtype), state dicts.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "loom/autograd.h"
#include "loom/io.h"
#include "loom/nn.h"
#include "nn/test_util.h"

namespace loom::testing {
namespace {

using nn::Linear;
using nn::Module;
using nn::ReLU;
using nn::Sequential;

std::shared_ptr<Sequential> mlp(Generator* gen = nullptr) {
  return std::make_shared<Sequential>(std::initializer_list<std::shared_ptr<Module>>{
      std::make_shared<Linear>(784, 256, true, gen), std::make_shared<ReLU>(),
      std::make_shared<Linear>(256, 128, true, gen), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, 10, true, gen)});
}

TEST(Module, MlpParameterNamesAndCounts) {
  auto net = mlp();
  auto named = net->named_parameters();
  ASSERT_EQ(named.size(), 6u);
  const std::vector<std::string> names = {"0.weight", "0.bias",   "2.weight",
                                          "2.bias",   "4.weight", "4.bias"};
  int64_t total = 0;
  for (size_t i = 0; i < named.size(); ++i) {
    EXPECT_EQ(named[i].first, names[i]);
    EXPECT_TRUE(named[i].second.requires_grad());
    EXPECT_TRUE(named[i].second.is_leaf());
    total += named[i].second.numel();
  }
  EXPECT_EQ(total, 235146);
  EXPECT_EQ(net->parameters().size(), 6u);
  EXPECT_EQ(net->named_parameters(/*recurse=*/false).size(), 0u);
  EXPECT_EQ(named[0].second.sizes(), IntArrayRef({256, 784}));
  EXPECT_EQ(named[1].second.sizes(), IntArrayRef({256}));
  EXPECT_EQ(named[0].second.dtype(), kFloat32);
  auto modules = net->named_modules();
  ASSERT_EQ(modules.size(), 6u);
  EXPECT_EQ(modules[0].first, "");
  EXPECT_EQ(modules[5].first, "4");
  EXPECT_EQ(net->at<Linear>(4)->out_features(), 10);
}

TEST(Module, NestedNamesBuffersAndSharedParameters) {
  struct Block : Module {
    std::shared_ptr<Linear> fc;
    Block() {
      fc = register_module("fc", std::make_shared<Linear>(3, 2));
      register_buffer("running", zeros({2}));
      register_buffer("scratch", zeros({1}), /*persistent=*/false);
    }
  };
  struct Net : Module {
    std::shared_ptr<Block> a, b;
    Net() {
      register_parameter("scale", ones({1}));
      a = register_module("encoder", std::make_shared<Block>());
      b = register_module("decoder", std::make_shared<Block>());
    }
  };
  Net net;
  std::vector<std::string> names;
  for (auto& [n, t] : net.named_parameters()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"scale", "encoder.fc.weight", "encoder.fc.bias",
                                             "decoder.fc.weight", "decoder.fc.bias"}));
  std::vector<std::string> bufs;
  for (auto& [n, t] : net.named_buffers()) bufs.push_back(n);
  EXPECT_EQ(bufs, (std::vector<std::string>{"encoder.running", "encoder.scratch", "decoder.running",
                                            "decoder.scratch"}));
  std::vector<std::string> keys;
  for (auto& [n, t] : net.state_dict()) keys.push_back(n);
  // PyTorch's order: each module's own parameters, then its own buffers, then its children.
  EXPECT_EQ(keys, (std::vector<std::string>{"scale", "encoder.running", "encoder.fc.weight",
                                            "encoder.fc.bias", "decoder.running",
                                            "decoder.fc.weight", "decoder.fc.bias"}));
  // One module under two names: its parameters are listed once.
  Sequential shared;
  auto lin = std::make_shared<Linear>(2, 2);
  shared.push_back(lin);
  shared.push_back(lin);
  EXPECT_EQ(shared.parameters().size(), 2u);
  EXPECT_EQ(shared.state_dict().size(), 4u);
}

TEST(Module, RegistrationErrors) {
  Module m;
  m.register_parameter("w", zeros({2}));
  EXPECT_CONTAINS(error_of<ValueError>([&] { m.register_parameter("w", zeros({2})); }),
                  "attribute \"w\" already exists");
  EXPECT_CONTAINS(error_of<ValueError>([&] { m.register_buffer("a.b", zeros({2})); }),
                  "can't contain");
  EXPECT_CONTAINS(error_of<TypeError>([&] { m.register_parameter("i", zeros({2}, kInt64)); }),
                  "floating-point");
  Tensor leaf = ones({2});
  leaf.requires_grad_();
  Tensor non_leaf = mul(leaf, 2.0);
  EXPECT_CONTAINS(error_of<ValueError>([&] { m.register_parameter("n", non_leaf); }), "leaf");
  EXPECT_CONTAINS(error_of<NotImplementedError>([&] { m.forward(ones({1})); }), "has no forward");
  EXPECT_CONTAINS(error_of<ValueError>([&] { (void)m.parameter("nope"); }), "no parameter");
  Sequential s;
  EXPECT_CONTAINS(error_of<IndexError>([&] { (void)s[0]; }), "out of range");
  s.push_back(std::make_shared<ReLU>());
  EXPECT_CONTAINS(error_of<TypeError>([&] { (void)s.at<Linear>(0); }), "ReLU");
}

TEST(Module, TrainEvalIsRecursive) {
  auto net = mlp();
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (auto& [n, m] : net->named_modules()) EXPECT_FALSE(m->is_training()) << n;
  net->train();
  for (auto& [n, m] : net->named_modules()) EXPECT_TRUE(m->is_training()) << n;
}

TEST(Module, ZeroGrad) {
  Linear lin(3, 2);
  for (const Tensor& p : lin.parameters()) autograd::set_grad(p, ones_like(p));
  lin.zero_grad(/*set_to_none=*/false);
  for (const Tensor& p : lin.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(sum(p.grad()).item<double>(), 0.0);
  }
  lin.zero_grad();
  for (const Tensor& p : lin.parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(Module, ToDtypeConvertsParametersAndForwardFollows) {
  Generator gen(3);
  Linear lin(4, 2, true, &gen);
  std::vector<double> w32 = values(lin.weight());
  lin.to(kFloat64);
  EXPECT_EQ(lin.weight().dtype(), kFloat64);
  EXPECT_EQ(lin.bias().dtype(), kFloat64);
  EXPECT_TRUE(lin.weight().requires_grad());
  EXPECT_EQ(values(lin.weight()), w32);
  Tensor y = lin(ones({3, 4}, kFloat64));
  EXPECT_EQ(y.dtype(), kFloat64);
  EXPECT_CONTAINS(error_of<TypeError>([&] {
                    lin(ones({3, 4}, kFloat32));
                  }),
                  "input dtype float32 does not match the module's parameter dtype float64");
}

// Module::to(device) on the devices every build has: the same device keeps every handle, Meta (a
// device without data) replaces each parameter in its slot with a leaf of the same shape and
// requires_grad, moves gradients and buffers, and recurses into children. cuda_train_test.cpp
// trains with it on a GPU.
TEST(Module, ToDeviceMovesParametersGradientsAndChildren) {
  Generator gen(5);
  auto net = mlp(&gen);
  Tensor held = net->parameters()[0];
  net->to(kCPU);
  EXPECT_TRUE(held.is_same(net->parameters()[0]));  // nothing to move: same tensors
  net->parameters()[1].requires_grad_(false);
  autograd::set_grad(net->parameters()[0], ones(held.sizes()));
  const Device meta(DeviceType::Meta);
  net->to(meta);
  const std::vector<Tensor> moved = net->parameters();
  ASSERT_EQ(moved.size(), 6u);
  for (size_t i = 0; i < moved.size(); ++i) {
    EXPECT_EQ(moved[i].device(), meta) << i;
    EXPECT_TRUE(moved[i].is_leaf()) << i;
    EXPECT_EQ(moved[i].requires_grad(), i != 1) << i;
  }
  EXPECT_EQ(moved[0].sizes(), held.sizes());
  EXPECT_FALSE(held.is_same(moved[0]));
  ASSERT_TRUE(moved[0].grad().defined());
  EXPECT_EQ(moved[0].grad().device(), meta);
  for (const auto& [name, p] : net->named_parameters()) EXPECT_EQ(p.device(), meta) << name;
}

TEST(Module, StateDictRoundTrip) {
  Generator g1(1), g2(2);
  auto a = mlp(&g1), b = mlp(&g2);
  EXPECT_NE(values(a->parameters()[0]), values(b->parameters()[0]));
  Tensor held = b->parameters()[0];  // a handle held elsewhere (as by an optimizer)
  auto result = b->load_state_dict(a->state_dict());
  EXPECT_TRUE(result.missing_keys.empty());
  EXPECT_TRUE(result.unexpected_keys.empty());
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(values(a->parameters()[i]), values(b->parameters()[i]));
  EXPECT_TRUE(held.is_same(b->parameters()[0]));  // loaded in place
  EXPECT_TRUE(b->parameters()[0].requires_grad());
  // State dict tensors alias the parameters but carry no autograd history.
  EXPECT_FALSE(a->state_dict()[0].second.requires_grad());

  // From a std::map as well.
  std::map<std::string, Tensor> as_map;
  for (auto& [k, t] : a->state_dict()) as_map[k] = t.clone();
  Generator g4(4);
  auto d = mlp(&g4);
  d->load_state_dict(as_map);
  EXPECT_EQ(values(d->parameters()[5]), values(a->parameters()[5]));

  // Through a safetensors file.
  const auto path =
      (std::filesystem::temp_directory_path() / "loom_nn_state_dict.safetensors").string();
  io::save_safetensors(path, a->state_dict());
  Generator g3(3);
  auto c = mlp(&g3);
  c->load_state_dict(io::load_safetensors(path).tensors);
  std::remove(path.c_str());
  Tensor x = randn({5, 784});
  EXPECT_TRUE(equal(a->forward(x), c->forward(x)));
}

TEST(Module, LoadStateDictErrors) {
  Linear lin(3, 2);
  nn::StateDict sd = lin.state_dict();
  nn::StateDict bad_shape = {{"weight", zeros({2, 4})}, {"bias", zeros({2})}};
  const std::string shape_msg = error_of<ValueError>([&] { lin.load_state_dict(bad_shape); });
  EXPECT_CONTAINS(shape_msg, "size mismatch for \"weight\"");
  EXPECT_CONTAINS(shape_msg, "[2, 4]");
  EXPECT_CONTAINS(shape_msg, "[2, 3]");
  nn::StateDict bad_dtype = {{"weight", zeros({2, 3}, kFloat64)}, {"bias", zeros({2})}};
  const std::string dtype_msg = error_of<TypeError>([&] { lin.load_state_dict(bad_dtype); });
  EXPECT_CONTAINS(dtype_msg, "dtype mismatch for \"weight\"");
  EXPECT_CONTAINS(dtype_msg, "float64");
  EXPECT_CONTAINS(dtype_msg, "float32");
  // Validation happens before any copy: the bias was not overwritten.
  EXPECT_NE(sum(abs(lin.bias())).item<double>(), 0.0);

  nn::StateDict partial = {{"weight", zeros({2, 3})}, {"extra", zeros({1})}};
  const std::string strict_msg = error_of<ValueError>([&] { lin.load_state_dict(partial); });
  EXPECT_CONTAINS(strict_msg, "missing keys [\"bias\"]");
  EXPECT_CONTAINS(strict_msg, "unexpected keys [\"extra\"]");
  auto r = lin.load_state_dict(partial, /*strict=*/false);
  EXPECT_EQ(r.missing_keys, std::vector<std::string>{"bias"});
  EXPECT_EQ(r.unexpected_keys, std::vector<std::string>{"extra"});
  EXPECT_EQ(sum(abs(lin.weight())).item<double>(), 0.0);
}

}  // namespace
}  // namespace loom::testing
