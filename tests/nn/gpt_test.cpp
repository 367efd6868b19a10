// The GPT model (include/loom/nn/gpt.h): its parameter layout against GPT-2's known figures, the
// reference attention against loops, the whole model's logits, loss and gradients against the same
// model written in PyTorch (through /usr/bin/python3, skipped without it), causality, training on a
// pattern until sampling reproduces it, and sampling's contract.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "loom/autograd.h"
#include "loom/io.h"
#include "loom/json.h"
#include "loom/memory.h"
#include "loom/memory/caching_allocator.h"
#include "loom/nn/gpt.h"
#include "loom/optim.h"
#include "nn/test_util.h"
#include "temp_dir.h"

namespace loom::testing {
namespace {

using nn::Gpt;
using nn::GptConfig;

// Hugging Face's GPT-2 small has 124,439,808 parameters (the head tied to wte).
TEST(Gpt, Gpt2SmallHasGpt2sParameterCount) {
  EXPECT_EQ(GptConfig::gpt2_small().num_parameters(), 124439808);
  EXPECT_NE(GptConfig::gpt2_small().str().find("124.4M parameters"), std::string::npos);
}

TEST(Gpt, ParametersFollowGpt2sLayout) {
  GptConfig c = GptConfig::tiny(50);
  c.n_layer = 3;
  Gpt model(c);
  int64_t total = 0;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, p] : model.named_parameters()) {
    total += p.numel();
    shapes[name] = p.sizes().vec();
  }
  EXPECT_EQ(total, c.num_parameters());
  EXPECT_EQ(shapes.size(), 2 + 3 * 12 + 2u);  // wte, wpe; 12 a block; ln_f
  EXPECT_EQ(shapes.at("transformer.wte.weight"), (std::vector<int64_t>{50, 64}));
  EXPECT_EQ(shapes.at("transformer.wpe.weight"), (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(shapes.at("transformer.h.2.attn.c_attn.weight"), (std::vector<int64_t>{192, 64}));
  EXPECT_EQ(shapes.at("transformer.h.0.mlp.c_fc.bias"), (std::vector<int64_t>{256}));
  EXPECT_EQ(shapes.at("transformer.h.1.mlp.c_proj.weight"), (std::vector<int64_t>{64, 256}));
  EXPECT_EQ(shapes.at("transformer.ln_f.weight"), (std::vector<int64_t>{64}));
  // GPT-2's initialisation: N(0, 0.02), the residual projections N(0, 0.02 / sqrt(2 n_layer)).
  std::map<std::string, Tensor> p;
  for (const auto& [name, t] : model.named_parameters()) p[name] = t;
  auto std_of = [](const Tensor& t) { return std::sqrt(mean(mul(t, t)).item<double>()); };
  EXPECT_NEAR(std_of(p["transformer.h.1.attn.c_attn.weight"]), 0.02, 0.001);
  EXPECT_NEAR(std_of(p["transformer.wte.weight"]), 0.02, 0.001);
  EXPECT_NEAR(std_of(p["transformer.h.1.mlp.c_proj.weight"]), 0.02 / std::sqrt(6.0), 0.0004);
  EXPECT_EQ(values(p["transformer.h.0.ln_2.weight"]), std::vector<double>(64, 1.0));
  EXPECT_EQ(values(p["transformer.h.0.attn.c_attn.bias"]), std::vector<double>(192, 0.0));
}

std::string shape_str_of(const Tensor& t) {
  std::string s;
  for (int64_t d : t.sizes()) s += std::to_string(d) + ",";
  return s;
}

// Attention by loops, in double: row i attends to j <= i.
std::vector<double> attention_by_loops(const std::vector<double>& q, const std::vector<double>& k,
                                       const std::vector<double>& v, int64_t bh, int64_t t,
                                       int64_t d) {
  std::vector<double> out(static_cast<size_t>(bh * t * d), 0.0);
  for (int64_t h = 0; h < bh; ++h) {
    for (int64_t i = 0; i < t; ++i) {
      std::vector<double> w(static_cast<size_t>(i + 1));
      double top = -std::numeric_limits<double>::infinity(), total = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double s = 0;
        for (int64_t e = 0; e < d; ++e)
          s += q[static_cast<size_t>((h * t + i) * d + e)] *
               k[static_cast<size_t>((h * t + j) * d + e)];
        w[static_cast<size_t>(j)] = s / std::sqrt(static_cast<double>(d));
        top = std::max(top, w[static_cast<size_t>(j)]);
      }
      for (double& x : w) total += (x = std::exp(x - top));
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t e = 0; e < d; ++e)
          out[static_cast<size_t>((h * t + i) * d + e)] +=
              w[static_cast<size_t>(j)] / total * v[static_cast<size_t>((h * t + j) * d + e)];
    }
  }
  return out;
}

TEST(Gpt, ReferenceAttentionMatchesLoops) {
  const int64_t b = 2, h = 3, t = 7, d = 5;
  const Tensor q = randn({b, h, t, d}, kFloat64), k = randn({b, h, t, d}, kFloat64),
               v = randn({b, h, t, d}, kFloat64);
  const std::vector<double> got = values(nn::causal_attention_reference(q, k, v));
  const std::vector<double> want = attention_by_loops(values(q), values(k), values(v), b * h, t, d);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << i;
  EXPECT_THROW(nn::causal_attention_reference(q, k, v.narrow(2, 0, 6)), ValueError);
}

// A 2-layer model of 2 heads, 8 wide, 8 positions (the PyTorch comparisons' size).
GptConfig small_config(int64_t vocab) {
  GptConfig c;
  c.vocab_size = vocab;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  return c;
}

// nanoGPT's forward pass in Python over the parameters P (attention written out), given the
// script's `idx`, `lin(x, name)` (a linear layer in the weights' layout) and `ln(x, name)`;
// `head` is the output projection's weight (vocab, C). Leaves `logits`.
std::string py_gpt_forward(const std::string& head) {
  return "B, T = idx.shape\n"
         "x = P['transformer.wte.weight'][idx] + P['transformer.wpe.weight'][torch.arange(T)]\n"
         "for l in range(2):\n"
         " p = 'transformer.h.%d.' % l\n"
         " q, k, v = lin(ln(x, p + 'ln_1'), p + 'attn.c_attn').split(C, dim=2)\n"
         " q, k, v = [a.view(B, T, H, C // H).transpose(1, 2) for a in (q, k, v)]\n"
         " att = (q @ k.transpose(-2, -1)) / (C // H) ** 0.5\n"
         " att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), "
         "float('-inf'))\n"
         " x = x + lin((att.softmax(-1) @ v).transpose(1, 2).reshape(B, T, C), p + 'attn.c_proj')\n"
         " x = x + lin(F.gelu(lin(ln(x, p + 'ln_2'), p + 'mlp.c_fc'), approximate='tanh'), "
         "p + 'mlp.c_proj')\n"
         "logits = ln(x, 'transformer.ln_f') @ " +
         head + ".t()\n";
}

// The same model in PyTorch (nanoGPT's forward, attention written out), fed loom's weights: the
// logits, the loss and every parameter's gradient agree to float64 rounding.
TEST(Gpt, LogitsLossAndGradientsMatchPyTorch) {
  const GptConfig c = small_config(13);
  Generator gen(7);
  Gpt model(c, &gen);
  model.to(kFloat64);
  const std::vector<int64_t> ids = {1, 5, 2, 12, 0, 7, 7, 3, 9, 4, 11, 6};
  const std::vector<int64_t> next = {5, 2, 12, 0, 7, 7, 3, 1, 4, 11, 6, 8};
  const Tensor idx = from_vector(ids, {2, 6}), targets = from_vector(next, {2, 6});
  const Tensor logits = model.forward(idx);
  const Tensor loss = model.loss(idx, targets);
  autograd::backward({loss});

  std::string script =
      "import sys\ntry:\n import torch\n import torch.nn.functional as F\nexcept Exception:\n"
      " print('NO_TORCH'); sys.exit(0)\n"
      "torch.set_default_dtype(torch.float64)\n"
      "C, H = 8, 2\nP = {}\n";
  for (const auto& [name, p] : model.named_parameters())
    script += "P['" + name + "'] = torch.tensor(" + py_list(values(p)) +
              ", dtype=torch.float64).reshape([" + shape_str_of(p) + "]).requires_grad_()\n";
  script +=
      "def lin(x, n):\n return F.linear(x, P[n + '.weight'], P[n + '.bias'])\n"
      "def ln(x, n):\n return F.layer_norm(x, (C,), P[n + '.weight'], P[n + '.bias'], 1e-5)\n"
      "idx = torch.tensor(" +
      py_list(std::vector<double>(ids.begin(), ids.end())) +
      ").long().reshape(2, 6)\n"
      "tgt = torch.tensor(" +
      py_list(std::vector<double>(next.begin(), next.end())) + ").long().reshape(2, 6)\n" +
      py_gpt_forward("P['transformer.wte.weight']") +
      "loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))\n"
      "loss.backward()\n"
      "print('logits', ' '.join('%.17g' % v for v in logits.flatten().tolist()))\n"
      "print('loss', '%.17g' % loss.item())\n"
      "for n, t in P.items():\n print('g:' + n, ' '.join('%.17g' % v for v in "
      "t.grad.flatten().tolist()))\n";
  const auto ref = run_python(script);
  if (ref.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  const std::vector<double> got_logits = values(logits);
  ASSERT_EQ(ref.at("logits").size(), got_logits.size());
  for (size_t i = 0; i < got_logits.size(); ++i)
    EXPECT_NEAR(got_logits[i], ref.at("logits")[i], 1e-10) << "logit " << i;
  EXPECT_NEAR(loss.item<double>(), ref.at("loss")[0], 1e-12);
  for (const auto& [name, p] : model.named_parameters()) {
    ASSERT_TRUE(p.grad().defined()) << name;
    const std::vector<double> g = values(p.grad());
    const std::vector<double>& want = ref.at("g:" + name);
    ASSERT_EQ(g.size(), want.size()) << name;
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want[i], 1e-10) << name << " " << i;
  }
}

// Note [GPT saved model]: hf_state_dict is GPT-2's layout as Hugging Face stores it. Written to
// safetensors and read back by a GPT-2 forward pass written against that layout in PyTorch (Conv1D:
// x @ W + b; the head is lm_head.weight), it gives loom's logits.
TEST(Gpt, HuggingFaceLayoutGivesTheSameLogitsInPyTorch) {
  const GptConfig c = small_config(17);
  Generator gen(5);
  Gpt model(c, &gen);
  model.eval();
  const std::vector<std::pair<std::string, Tensor>> hf = model.hf_state_dict();
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& [name, t] : hf) shapes[name] = t.sizes().vec();
  EXPECT_EQ(shapes.at("transformer.h.0.attn.c_attn.weight"), (std::vector<int64_t>{8, 24}));
  EXPECT_EQ(shapes.at("transformer.h.1.mlp.c_proj.weight"), (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{17, 8}));
  const Json config = Json::parse(c.hf_config_json(), "config.json");
  EXPECT_EQ(config.at("n_layer").as_int(), 2);
  EXPECT_EQ(config.at("n_positions").as_int(), 8);
  EXPECT_EQ(config.at("activation_function").as_string(), "gelu_new");

  TempDir dir;
  io::TensorMap tensors(hf.begin(), hf.end());
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  const std::vector<int64_t> ids = {3, 16, 0, 9, 9, 4, 12};
  const std::vector<double> logits = values(model.forward(from_vector(ids, {1, 7})).to(kFloat64));
  const std::string script =
      "import sys, json, struct\ntry:\n import torch\n import torch.nn.functional as F\n"
      "except Exception:\n print('NO_TORCH'); sys.exit(0)\n"
      "b = open('" +
      dir / "model.safetensors" +
      "', 'rb').read()\n"
      "n = struct.unpack('<Q', b[:8])[0]\nh = json.loads(b[8:8 + n])\nP = {}\n"
      "for k, m in h.items():\n"
      " if k == '__metadata__': continue\n"
      " s, e = m['data_offsets']\n"
      " P[k] = torch.frombuffer(bytearray(b[8 + n + s:8 + n + e]), dtype=torch.float32)"
      ".reshape(m['shape'])\n"
      "C, H = 8, 2\n"
      "def lin(x, k):\n return x @ P[k + '.weight'] + P[k + '.bias']\n"
      "def ln(x, k):\n return F.layer_norm(x, (C,), P[k + '.weight'], P[k + '.bias'], 1e-5)\n"
      "idx = torch.tensor([" +
      [&] {
        std::string l;
        for (int64_t v : ids) l += std::to_string(v) + ",";
        return l;
      }() +
      "]).reshape(1, -1)\n" + py_gpt_forward("P['lm_head.weight']") +
      "print('logits', ' '.join('%.9g' % v for v in logits.flatten().tolist()))\n";
  const auto ref = run_python(script);
  if (ref.empty()) GTEST_SKIP() << "/usr/bin/python3 with torch is not available";
  ASSERT_EQ(ref.at("logits").size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    EXPECT_NEAR(logits[i], ref.at("logits")[i], 2e-5) << "logit " << i;
}

// A token's logits depend only on the tokens up to it.
TEST(Gpt, LogitsDoNotSeeTheFuture) {
  GptConfig c = GptConfig::tiny(20);
  Gpt model(c);
  model.eval();
  Tensor idx = from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {1, 8});
  const Tensor before = model.forward(idx);
  Tensor changed = idx.clone();
  changed.select(1, 5).fill_(7);
  const Tensor after = model.forward(changed);
  EXPECT_TRUE(allclose(before.narrow(1, 0, 5), after.narrow(1, 0, 5), 0, 0));
  EXPECT_FALSE(allclose(before.narrow(1, 5, 3), after.narrow(1, 5, 3), 1e-6, 1e-6));
  EXPECT_THROW(model.forward(zeros({1, 65}, kInt64)), ValueError);  // block_size 64
  EXPECT_THROW(model.forward(full({1, 4}, 20, kInt64)), IndexError);
}

// Trained on a repeating pattern, the model predicts it: greedy sampling (top_k 1) continues it.
TEST(Gpt, LearnsAPatternAndSamplingContinuesIt) {
  const std::vector<int64_t> pattern = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 3, 5, 7};
  std::vector<int64_t> stream;
  while (stream.size() < 2000) stream.insert(stream.end(), pattern.begin(), pattern.end());
  GptConfig c = GptConfig::tiny(12);
  c.block_size = 32;
  Generator gen(3);
  Gpt model(c, &gen);
  optim::AdamW opt(model.parameters(), {.lr = 3e-3, .weight_decay = 0.0});
  const int64_t b = 8, t = 32;
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    std::vector<int64_t> x, y;
    for (int64_t r = 0; r < b; ++r) {
      const size_t at = static_cast<size_t>((step * 37 + r * 101) % 1900);
      x.insert(x.end(), stream.begin() + static_cast<int64_t>(at),
               stream.begin() + static_cast<int64_t>(at) + t);
      y.insert(y.end(), stream.begin() + static_cast<int64_t>(at) + 1,
               stream.begin() + static_cast<int64_t>(at) + t + 1);
    }
    opt.zero_grad();
    const Tensor loss = model.loss(from_vector(x, {b, t}), from_vector(y, {b, t}));
    autograd::backward({loss});
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(12.0), 0.3);  // at initialisation: about uniform
  EXPECT_LT(last, 0.2) << "first loss " << first;
  const Tensor prompt = from_vector(std::vector<int64_t>{9, 10, 11, 3}, {1, 4});
  const Tensor out = model.generate(prompt, {.max_new_tokens = 10, .top_k = 1, .gen = &gen});
  EXPECT_EQ(to_vector<int64_t>(out),
            (std::vector<int64_t>{9, 10, 11, 3, 5, 7, 0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_TRUE(model.is_training());  // generate restored the mode
}

TEST(Gpt, SamplingIsSeededAndChecksItsOptions) {
  Gpt model(GptConfig::tiny(30));
  const Tensor prompt = from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  Generator a(11), b(11);
  const Tensor x = model.generate(prompt, {.max_new_tokens = 70, .gen = &a});
  const Tensor y = model.generate(prompt, {.max_new_tokens = 70, .gen = &b});
  ASSERT_EQ(x.sizes().vec(), (std::vector<int64_t>{2, 73}));  // past block_size 64: the last 64
  EXPECT_EQ(to_vector<int64_t>(x), to_vector<int64_t>(y));
  for (int64_t v : to_vector<int64_t>(x)) EXPECT_TRUE(v >= 0 && v < 30) << v;
  EXPECT_THROW(model.generate(prompt, {.temperature = 0.0}), ValueError);
  EXPECT_THROW(model.generate(prompt, {.top_k = -1}), ValueError);
  GptConfig bad = GptConfig::tiny(30);
  bad.n_head = 3;
  EXPECT_THROW(Gpt{bad}, ValueError);
}

// The gradients of every parameter after one backward of `model` over windows `ids` (B, T + 1),
// split into `micro` micro-batches whose losses are scaled by 1 / micro (gradient accumulation,
// Note [GPT training]); `seed` seeds the default generator first (attention dropout).
std::map<std::string, std::vector<double>> grads_of(Gpt& model, const Tensor& ids, int64_t micro,
                                                    uint64_t seed = 0) {
  manual_seed(seed);
  model.zero_grad();
  const int64_t b = ids.size(0), t = ids.size(1) - 1;
  for (int64_t m = 0; m < micro; ++m) {
    const Tensor w = narrow(ids, 0, m * (b / micro), b / micro);
    const Tensor loss =
        model.loss(narrow(w, 1, 0, t).contiguous(), narrow(w, 1, 1, t).contiguous());
    autograd::backward({micro > 1 ? mul(loss, 1.0 / static_cast<double>(micro)) : loss});
  }
  std::map<std::string, std::vector<double>> g;
  for (const auto& [name, p] : model.named_parameters()) g[name] = values(p.grad());
  return g;
}

Tensor random_windows(int64_t b, int64_t t, int64_t vocab) {
  Generator gen(11);
  return randint(0, vocab, {b, t + 1}, DType::Int64, gen);
}

// --grad-accum: 4 micro-batches of 2 windows give the gradients of one batch of 8 (float32: to
// rounding; the sums are taken in another order).
TEST(Gpt, GradientAccumulationMatchesOneLargeBatch) {
  const GptConfig c = GptConfig::tiny(97);
  Generator g1(3), g2(3);
  Gpt whole(c, &g1), split(c, &g2);
  const Tensor ids = random_windows(8, 16, c.vocab_size);
  const auto want = grads_of(whole, ids, 1);
  const auto got = grads_of(split, ids, 4);
  ASSERT_EQ(want.size(), got.size());
  for (const auto& [name, w] : want) {
    const std::vector<double>& g = got.at(name);
    double scale = 0;
    for (double v : w) scale = std::max(scale, std::abs(v));
    ASSERT_GT(scale, 0) << name;
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], 2e-6 * scale + 1e-9) << name << " " << i;
  }
  // One micro-batch alone is not the whole batch: the check above can tell them apart.
  Generator g3(3);
  Gpt half(c, &g3);
  const auto one = grads_of(half, narrow(ids, 0, 0, 2), 1);
  EXPECT_NE(one.at("transformer.h.0.attn.c_attn.weight"),
            want.at("transformer.h.0.attn.c_attn.weight"));
}

// --activation-checkpointing: the recomputed blocks give bitwise the gradients of the plain model
// on the CPU, without dropout and with it (the generators are restored for the recompute), and the
// graph holds one CheckpointBackward per block.
TEST(Gpt, ActivationCheckpointingGivesBitwiseTheSameGradients) {
  for (double p : {0.0, 0.2}) {
    GptConfig c = GptConfig::tiny(61);
    c.n_layer = 3;
    c.dropout = p;
    GptConfig cc = c;
    cc.activation_checkpointing = true;
    Generator g1(5), g2(5);
    Gpt plain(c, &g1), ckpt(cc, &g2);
    const Tensor ids = random_windows(4, 32, c.vocab_size);
    const auto want = grads_of(plain, ids, 1, 42);
    const auto got = grads_of(ckpt, ids, 1, 42);
    for (const auto& [name, w] : want) EXPECT_EQ(got.at(name), w) << name << " dropout " << p;
    // The generators advanced alike (the recompute put them back where the forward left them).
    EXPECT_EQ(g1.state(), g2.state());
    const Tensor loss =
        ckpt.loss(narrow(ids, 1, 0, 32).contiguous(), narrow(ids, 1, 1, 32).contiguous());
    const std::string graph = autograd::describe_graph(loss);
    size_t n = 0;
    for (size_t at = graph.find("CheckpointBackward"); at != std::string::npos;
         at = graph.find("CheckpointBackward", at + 1))
      ++n;
    EXPECT_EQ(n, 3u) << graph;
  }
  // With dropout, other draws give other gradients: the equality above is not vacuous.
  GptConfig c = GptConfig::tiny(61);
  c.dropout = 0.2;
  Generator g1(5), g2(5);
  Gpt a(c, &g1), b(c, &g2);
  const Tensor ids = random_windows(4, 32, c.vocab_size);
  EXPECT_NE(grads_of(a, ids, 1, 1).at("transformer.h.0.mlp.c_fc.weight"),
            grads_of(b, ids, 1, 2).at("transformer.h.0.mlp.c_fc.weight"));
}

// The point of checkpointing: the activations kept between forward and backward. Measured with
// CPU tensors from a caching allocator (memory/caching_allocator.h): bytes still allocated after
// the forward pass (what the graph saved), and the peak over forward and backward.
TEST(Gpt, ActivationCheckpointingKeepsLessMemory) {
  // Tensors allocated here may outlive the test's scope in caches: the allocator is never freed.
  static auto* device = new memory::SimulatedDevice(size_t{4} << 30, /*backed=*/true);
  static auto* cache = new memory::CachingAllocator(*device);
  static auto* adapter = new memory::CachingAllocatorAdapter(*cache, kCPU);
  struct Usage {
    int64_t after_forward, peak;
  };
  auto measure = [&](bool checkpointing) {
    GptConfig c = GptConfig::tiny(128);
    c.n_layer = 6;
    c.activation_checkpointing = checkpointing;
    Generator gen(9);
    Gpt model(c, &gen);
    const Tensor ids = random_windows(8, 64, c.vocab_size);
    const Tensor x = narrow(ids, 1, 0, 64).contiguous(), y = narrow(ids, 1, 1, 64).contiguous();
    set_allocator(DeviceType::CPU, adapter);
    Usage u{};
    {
      const int64_t base = cache->stats().allocated_bytes.current;
      cache->reset_peak_stats();
      Tensor loss = model.loss(x, y);
      u.after_forward = cache->stats().allocated_bytes.current - base;
      autograd::backward({loss});
      u.peak = cache->stats().allocated_bytes.peak - base;
      model.zero_grad();
    }
    set_allocator(DeviceType::CPU, nullptr);
    return u;
  };
  const Usage plain = measure(false), ckpt = measure(true);
  // Six blocks keep ~20 activations of (8, 64, 64..256) and the attention weights each;
  // checkpointed they keep their inputs only (plus the head's logits, which both keep).
  EXPECT_LT(ckpt.after_forward * 2, plain.after_forward)
      << "after forward: " << ckpt.after_forward << " vs " << plain.after_forward;
  EXPECT_LT(ckpt.peak, plain.peak) << "peak: " << ckpt.peak << " vs " << plain.peak;
}

}  // namespace
}  // namespace loom::testing
