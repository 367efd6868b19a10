// GPT: a GPT-2-style decoder-only transformer (see include/loom/nn/gpt.h).
#include "loom/nn/gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>

#include "loom/autograd.h"
#include "loom/autograd_checkpoint.h"
#include "loom/nn/init.h"
#include "loom/ops.h"
#include "nn/check.h"

namespace loom::nn {

GptConfig GptConfig::gpt2_small() {
  return GptConfig{};
}

GptConfig GptConfig::tiny(int64_t vocab_size) {
  GptConfig c;
  c.vocab_size = vocab_size;
  c.block_size = 64;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 64;
  return c;
}

void GptConfig::check() const {
  auto positive = [](int64_t v, const char* what) {
    LOOM_CHECK(v > 0, "[GPT] ", what, " must be positive but got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  LOOM_CHECK(n_embd % n_head == 0, "[GPT] n_embd (", n_embd, ") must be a multiple of n_head (",
             n_head, ")");
  LOOM_CHECK(dropout >= 0.0 && dropout < 1.0, "[GPT] dropout must be in [0, 1) but got ", dropout);
}

int64_t GptConfig::num_parameters() const {
  const int64_t c = n_embd, b = bias ? 1 : 0;
  const int64_t ln = c + b * c;
  const int64_t block = 2 * ln + (3 * c * c + b * 3 * c) + (c * c + b * c) +
                        (4 * c * c + b * 4 * c) + (4 * c * c + b * c);
  return vocab_size * c + block_size * c + n_layer * block + ln;
}

double GptConfig::flops_per_token(int64_t t) const {
  const double n = static_cast<double>(num_parameters() - block_size * n_embd);
  return 6.0 * n + 12.0 * static_cast<double>(n_layer * n_embd * t);
}

std::string GptConfig::str() const {
  char b[200];
  std::snprintf(b, sizeof(b),
                "GPT(%lld layers, %lld heads, %lld wide, %lld positions, %lld tokens, dropout %g, "
                "%.1fM parameters)",
                static_cast<long long>(n_layer), static_cast<long long>(n_head),
                static_cast<long long>(n_embd), static_cast<long long>(block_size),
                static_cast<long long>(vocab_size), dropout,
                static_cast<double>(num_parameters()) / 1e6);
  return b;
}

std::string GptConfig::hf_config_json() const {
  char b[600];
  std::snprintf(b, sizeof(b),
                "{\n  \"architectures\": [\"GPT2LMHeadModel\"],\n  \"model_type\": \"gpt2\",\n"
                "  \"vocab_size\": %lld,\n  \"n_positions\": %lld,\n  \"n_ctx\": %lld,\n"
                "  \"n_embd\": %lld,\n  \"n_layer\": %lld,\n  \"n_head\": %lld,\n"
                "  \"activation_function\": \"gelu_new\",\n  \"layer_norm_epsilon\": 1e-05,\n"
                "  \"resid_pdrop\": %g,\n  \"embd_pdrop\": %g,\n  \"attn_pdrop\": %g,\n"
                "  \"tie_word_embeddings\": true\n}\n",
                static_cast<long long>(vocab_size), static_cast<long long>(block_size),
                static_cast<long long>(block_size), static_cast<long long>(n_embd),
                static_cast<long long>(n_layer), static_cast<long long>(n_head), dropout, dropout,
                dropout);
  return b;
}

// ---- attention ----

Tensor causal_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                  double dropout_p, Generator* gen) {
  LOOM_CHECK(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
             "[attention] expected q, k and v of one shape (B, H, T, D) but got ", q.shape_str(),
             ", ", k.shape_str(), " and ", v.shape_str());
  const int64_t t = q.size(2), d = q.size(3);
  Tensor att = mul(matmul(q, transpose(k, -2, -1)), 1.0 / std::sqrt(static_cast<double>(d)));
  // Row i (a query) sees columns j <= i.
  const Tensor pos = arange(t, TensorOptions(kInt64).with_device(q.device()));
  const Tensor future = gt(unsqueeze(pos, 0), unsqueeze(pos, 1));
  att = softmax(masked_fill(att, future, -std::numeric_limits<double>::infinity()), -1);
  if (dropout_p > 0.0)
    att = dropout(att, dropout_p, true,
                  gen != nullptr ? std::optional<Generator>(*gen) : std::nullopt);
  return matmul(att, v);
}

CausalSelfAttention::CausalSelfAttention(const GptConfig& config, Generator* gen)
    : n_head_(config.n_head), n_embd_(config.n_embd), dropout_(config.dropout) {
  config.check();
  c_attn_ =
      register_module("c_attn", std::make_shared<Linear>(n_embd_, 3 * n_embd_, config.bias, gen));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(n_embd_, n_embd_, config.bias, gen));
  resid_dropout_ = std::make_shared<Dropout>(config.dropout, gen);
}

std::string CausalSelfAttention::name() const {
  return loom::detail::str_cat("CausalSelfAttention(", n_embd_, " wide, ", n_head_, " heads)");
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  detail::check_defined_input(*this, x);
  LOOM_CHECK(x.dim() == 3 && x.size(2) == n_embd_, "[", name(), "] expected an input (B, T, ",
             n_embd_, ") but got ", x.shape_str());
  const int64_t b = x.size(0), t = x.size(1), d = n_embd_ / n_head_;
  const std::vector<Tensor> qkv = split(c_attn_->forward(x), n_embd_, 2);
  auto heads = [&](const Tensor& a) { return transpose(reshape(a, {b, t, n_head_, d}), 1, 2); };
  // Fused flash attention where it applies (Note [Attention backends]).
  Tensor y = scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]),
                                          is_training() ? dropout_ : 0.0, /*is_causal=*/true);
  y = reshape(transpose(y, 1, 2), {b, t, n_embd_});
  y = c_proj_->forward(y);
  resid_dropout_->train(is_training());
  return resid_dropout_->forward(y);
}

// ---- MLP and block ----

GptMlp::GptMlp(const GptConfig& config, Generator* gen) {
  c_fc_ = register_module(
      "c_fc", std::make_shared<Linear>(config.n_embd, 4 * config.n_embd, config.bias, gen));
  c_proj_ = register_module(
      "c_proj", std::make_shared<Linear>(4 * config.n_embd, config.n_embd, config.bias, gen));
  dropout_ = std::make_shared<Dropout>(config.dropout, gen);
}

Tensor GptMlp::forward(const Tensor& x) {
  dropout_->train(is_training());
  return dropout_->forward(c_proj_->forward(gelu(c_fc_->forward(x), "tanh")));
}

GptBlock::GptBlock(const GptConfig& config, Generator* gen)
    : checkpointing_(config.activation_checkpointing) {
  if (gen != nullptr) gen_ = *gen;
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(std::vector<int64_t>{config.n_embd},
                                                              1e-5, true, config.bias));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(config, gen));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(std::vector<int64_t>{config.n_embd},
                                                              1e-5, true, config.bias));
  mlp_ = register_module("mlp", std::make_shared<GptMlp>(config, gen));
}

Tensor GptBlock::forward(const Tensor& x) {
  if (!checkpointing_ || !is_training() || !autograd::GradMode::is_enabled()) return run(x);
  autograd::CheckpointOptions co;
  if (gen_) co.generators.push_back(*gen_);
  return autograd::checkpoint(
      [this](const std::vector<Tensor>& in) { return std::vector<Tensor>{run(in[0])}; }, {x},
      co)[0];
}

Tensor GptBlock::run(const Tensor& x) {
  const Tensor h = add(x, attn_->forward(ln_1_->forward(x)));
  return add(h, mlp_->forward(ln_2_->forward(h)));
}

// ---- the model ----

Gpt::Gpt(const GptConfig& config, Generator* gen) : config_(config) {
  config_.check();
  transformer_ = register_module("transformer", std::make_shared<Module>());
  wte_ = transformer_->register_module(
      "wte", std::make_shared<Embedding>(config_.vocab_size, config_.n_embd, std::nullopt, gen));
  wpe_ = transformer_->register_module(
      "wpe", std::make_shared<Embedding>(config_.block_size, config_.n_embd, std::nullopt, gen));
  drop_ = std::make_shared<Dropout>(config_.dropout, gen);
  h_ = transformer_->register_module("h", std::make_shared<Sequential>());
  for (int64_t l = 0; l < config_.n_layer; ++l)
    h_->push_back(std::make_shared<GptBlock>(config_, gen));
  ln_f_ = transformer_->register_module(
      "ln_f",
      std::make_shared<LayerNorm>(std::vector<int64_t>{config_.n_embd}, 1e-5, true, config_.bias));
  // GPT-2's initialisation, in the order of named_parameters().
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (const auto& [name, p] : named_parameters()) {
    const bool is_bias = name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    if (name.find(".ln_") != std::string::npos || name.find("ln_f.") != std::string::npos) {
      if (is_bias) {
        init::zeros_(p);
      } else {
        init::ones_(p);
      }
    } else if (is_bias) {
      init::zeros_(p);
    } else if (name.find("c_proj.weight") != std::string::npos) {
      init::normal_(p, 0.0, residual_std, gen);
    } else {
      init::normal_(p, 0.0, 0.02, gen);
    }
  }
}

std::string Gpt::name() const {
  return config_.str();
}

Tensor Gpt::forward(const Tensor& idx) {
  detail::check_defined_input(*this, idx);
  LOOM_CHECK(idx.dim() == 2, "[GPT] expected token ids (B, T) but got ", idx.shape_str());
  const int64_t t = idx.size(1);
  LOOM_CHECK(t <= config_.block_size, "[GPT] a sequence of ", t,
             " tokens is longer than the model's block_size ", config_.block_size);
  drop_->train(is_training());
  // Positions 0..t-1 are the first t rows of wpe: a view of the weight rather than an embedding of
  // arange(t) (the same values and gradient, without a fresh index tensor to check on the device
  // each step: Note [Device index checks]).
  const Tensor pos_emb = narrow(wpe_->weight(), 0, 0, t);
  Tensor x = drop_->forward(add(wte_->forward(idx), pos_emb));
  x = ln_f_->forward(h_->forward(x));
  // The tied head as a linear layer (nanoGPT's lm_head): the weight is read in its own layout, so
  // the autocast cast is a flat copy and its gradient comes out contiguous (no transposed copies).
  return linear(x, wte_->weight());
}

std::vector<std::pair<std::string, Tensor>> Gpt::hf_state_dict() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, p] : named_parameters()) {
    const bool conv1d =
        name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0 &&
        (name.find(".c_attn.") != std::string::npos || name.find(".c_proj.") != std::string::npos ||
         name.find(".c_fc.") != std::string::npos);
    out.emplace_back(name, conv1d ? loom::t(p.detach()).contiguous() : p.detach().clone());
  }
  out.emplace_back("lm_head.weight", wte_->weight().detach().clone());
  return out;
}

Tensor Gpt::loss(const Tensor& idx, const Tensor& targets) {
  const Tensor logits = forward(idx);
  LOOM_CHECK(targets.sizes() == idx.sizes(), "[GPT] targets ", targets.shape_str(),
             " must have the shape of the token ids ", idx.shape_str());
  return cross_entropy(reshape(logits, {-1, config_.vocab_size}), reshape(targets, {-1}));
}

Tensor Gpt::generate(const Tensor& idx, const SampleOptions& o) {
  LOOM_CHECK(idx.dim() == 2 && idx.size(1) >= 1, "[GPT] generate expects token ids (B, T) with ",
             "T >= 1 but got ", idx.shape_str());
  LOOM_CHECK(o.temperature > 0.0, "[GPT] temperature must be positive but got ", o.temperature);
  LOOM_CHECK(o.top_k >= 0, "[GPT] top_k must be non-negative but got ", o.top_k);
  const bool was_training = is_training();
  eval();
  autograd::NoGradGuard no_grad;
  Generator& gen = o.gen != nullptr ? *o.gen : default_generator();
  Tensor out = idx.to(kInt64);
  const int64_t b = idx.size(0), v = config_.vocab_size;
  std::vector<double> p(static_cast<size_t>(v));
  std::vector<int64_t> order(static_cast<size_t>(v));
  for (int64_t step = 0; step < o.max_new_tokens; ++step) {
    const int64_t t = out.size(1), from = std::max<int64_t>(0, t - config_.block_size);
    const Tensor logits = forward(narrow(out, 1, from, t - from));
    const Tensor last = logits.select(1, -1).to(kFloat64).to(kCPU).contiguous();  // (B, V)
    std::vector<int64_t> next(static_cast<size_t>(b));
    for (int64_t r = 0; r < b; ++r) {
      const double* row = last.data_ptr<double>() + r * v;
      for (int64_t j = 0; j < v; ++j) p[static_cast<size_t>(j)] = row[j] / o.temperature;
      // Top-k: everything below the k-th largest logit is dropped.
      double floor = -std::numeric_limits<double>::infinity();
      if (o.top_k > 0 && o.top_k < v) {
        std::iota(order.begin(), order.end(), 0);
        std::nth_element(order.begin(), order.begin() + (o.top_k - 1), order.end(),
                         [&](int64_t a, int64_t c) {
                           return p[static_cast<size_t>(a)] > p[static_cast<size_t>(c)];
                         });
        floor = p[static_cast<size_t>(order[static_cast<size_t>(o.top_k - 1)])];
      }
      const double top = *std::max_element(p.begin(), p.end());
      double total = 0;
      for (double& x : p) {
        x = x < floor ? 0.0 : std::exp(x - top);
        total += x;
      }
      const GeneratorState s = gen.reserve(2);
      const uint64_t bits = (static_cast<uint64_t>(philox_draw(s, 0)) << 32) | philox_draw(s, 1);
      double u = uint64_to_unit_double(bits) * total;
      int64_t pick = v - 1;
      for (int64_t j = 0; j < v; ++j) {
        u -= p[static_cast<size_t>(j)];
        if (u < 0.0 && p[static_cast<size_t>(j)] > 0.0) {
          pick = j;
          break;
        }
      }
      while (p[static_cast<size_t>(pick)] == 0.0 && pick > 0) --pick;  // rounding at the end
      next[static_cast<size_t>(r)] = pick;
    }
    const Tensor column = from_vector(next, {b, 1}).to(out.device());
    out = cat({out, column}, 1);
  }
  train(was_training);
  return out;
}

}  // namespace loom::nn
