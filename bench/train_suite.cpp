// `loom bench train`: one training step of an MLP and the cost of recording autograd, against
// libtorch (loom-anchor-torch measures the same names; see Note [train suite model] there).
#include <memory>

#include "bench.h"
#include "loom/autograd.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"

namespace loom::bench {
namespace {

struct TrainState {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
  Tensor a8, b8;
  void step(bool set_to_none) {
    opt->zero_grad(set_to_none);
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    opt->step();
  }
};

std::vector<Measure> setup_train(const SuiteOptions& opt) {
  auto s = std::make_shared<TrainState>();
  Generator gen(0);
  s->model = std::make_shared<nn::Sequential>();
  s->model->push_back(std::make_shared<nn::Linear>(784, 512, true, &gen));
  s->model->push_back(std::make_shared<nn::ReLU>());
  s->model->push_back(std::make_shared<nn::Linear>(512, 256, true, &gen));
  s->model->push_back(std::make_shared<nn::ReLU>());
  s->model->push_back(std::make_shared<nn::Linear>(256, 10, true, &gen));
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  s->opt = std::make_unique<optim::SGD>(s->model->parameters(), o);
  s->x = rand({128, 784}, {}, gen);
  s->y = randint(0, 10, {128}, DType::Int64, gen);
  s->a8 = rand({8}).requires_grad_();
  s->b8 = rand({8}).requires_grad_();
  const int reps = opt.quick ? 2 : 5;
  const int k = opt.quick ? 3 : 10;
  std::vector<Measure> m;
  const int iters = opt.quick ? 20000 : 100000;
  m.push_back({"autograd_add_8", "ns/op", true, 0.5, 1, [s, iters, reps] {
                 double t = median_seconds(
                     [&] {
                       for (int i = 0; i < iters; ++i) Tensor c = add(s->a8, s->b8);
                     },
                     reps);
                 return t / iters * 1e9;
               }});
  // mlp_step zeroes gradients in place (libtorch 1.13's only zero_grad); mlp_step_none sets them to
  // none (loom's and PyTorch 2's default), so backward writes them fresh instead of adding.
  for (bool none : {false, true}) {
    for (int th : opt.threads) {
      const std::string name =
          std::string(none ? "mlp_step_none_t" : "mlp_step_t") + std::to_string(th);
      m.push_back({name, "ms/step", true, 0.8, th, [s, reps, k, none] {
                     for (int i = 0; i < 3; ++i) s->step(none);
                     double t = median_seconds(
                         [&] {
                           for (int i = 0; i < k; ++i) s->step(none);
                         },
                         reps);
                     return t / k * 1e3;
                   }});
    }
  }
  return m;
}

const RegisterSuite kTrain(Suite{"train", "MLP training step and autograd overhead vs libtorch",
                                 "loom-anchor-torch", "libtorch 1.13 (OpenBLAS)", setup_train,
                                 nullptr});

}  // namespace
}  // namespace loom::bench
