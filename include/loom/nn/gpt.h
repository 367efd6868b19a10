// A GPT-2-style decoder-only transformer (nn layer): token and position embeddings, pre-LN blocks
// of causal self-attention and a GELU MLP, a final LayerNorm, and a language-model head tied to the
// token embedding; configurable from a tiny model that trains on the CPU in seconds to GPT-2 small
// (124M parameters).
//
// Parameter names follow Hugging Face's GPT-2 layout with nanoGPT's module tree:
// "transformer.wte.weight", "transformer.h.0.ln_1.weight", "transformer.h.0.attn.c_attn.weight",
// ..., "transformer.ln_f.bias". The head has no parameter of its own (it multiplies by
// transformer.wte.weight), as with weight tying in both. The linear layers keep loom's (out, in)
// weight layout; Hugging Face's Conv1D stores (in, out), which an exporter transposes.
//
// Initialisation as GPT-2's: weights and embeddings N(0, 0.02), biases zero, LayerNorms one and
// zero, and the projections that write into the residual stream (attn.c_proj, mlp.c_proj)
// N(0, 0.02 / sqrt(2 n_layer)). One generator (or the default one) gives every draw in the order
// of named_parameters(), so one seed gives one model.
//
// Ownership: a Gpt owns its modules; forward's results are new tensors. Not thread-safe: one
// thread runs a model at a time (as every Module).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/export.h"
#include "loom/generator.h"
#include "loom/nn.h"
#include "loom/tensor.h"

namespace loom::nn {

struct LOOM_API GptConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // the longest sequence (rows of the position embedding)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0.0;  // after embeddings, attention weights, and each residual branch
  bool bias = true;      // biases in the linear layers and LayerNorms
  // Each block's activations are recomputed in the backward instead of kept, in training with grad
  // (autograd::checkpoint, Note [Activation checkpointing]): the same gradients for the memory of
  // the blocks' inputs only, at the cost of one more forward pass of the blocks.
  bool activation_checkpointing = false;

  // GPT-2 small: 12 layers, 12 heads, 768 wide, 1024 positions, 50257 tokens (124M parameters).
  static GptConfig gpt2_small();
  // A model that trains on two CPU cores in seconds: 2 layers, 4 heads, 64 wide, 64 positions.
  static GptConfig tiny(int64_t vocab_size);
  // ValueError naming the field when a size is not positive, n_embd is not a multiple of n_head,
  // or dropout is outside [0, 1).
  void check() const;
  // Parameters (the tied head counted once), as the model's parameters().numel summed.
  int64_t num_parameters() const;
  // Training FLOPs per token of a forward and backward pass at sequence length `t` (nanoGPT's and
  // PaLM's estimate: 6 N + 12 n_layer n_embd t, N without the position embedding): the numerator
  // of model FLOP utilisation.
  double flops_per_token(int64_t t) const;
  // "GPT(12 layers, 12 heads, 768 wide, 1024 positions, 50257 tokens, dropout 0, 124.4M
  // parameters)"
  std::string str() const;
  // Hugging Face's config.json of this model (GPT2LMHeadModel: n_layer, n_head, n_embd,
  // n_positions, vocab_size, gelu_new, tied embeddings).
  std::string hf_config_json() const;
};

// Causal multi-head self-attention of x (B, T, C): one linear layer c_attn makes q, k and v (each
// split into n_head heads of C / n_head), softmax(q k^T / sqrt(d) masked to j <= i) v per head,
// heads concatenated, then c_proj. Dropout on the attention weights and on the output in training.
// The attention itself is scaled_dot_product_attention (fused flash kernels where they apply).
class LOOM_API CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GptConfig& config, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override;

 private:
  int64_t n_head_, n_embd_;
  double dropout_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> resid_dropout_;
};

// The reference attention written out in operators: q, k, v of (B, H, T, D), causal, scaled by
// 1 / sqrt(D), dropout `p` on the weights when p > 0. Materialises the (T, T) scores; tests check
// the model's fused attention against it.
LOOM_API Tensor causal_attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                           double dropout_p = 0.0, Generator* gen = nullptr);

// The block's MLP: c_fc (C -> 4C), GELU (tanh approximation, as GPT-2), c_proj (4C -> C), dropout.
class LOOM_API GptMlp : public Module {
 public:
  GptMlp(const GptConfig& config, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GptMlp"; }

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<Dropout> dropout_;
};

// A pre-LN block: x + attn(ln_1(x)), then + mlp(ln_2(.)). With config.activation_checkpointing it
// runs under autograd::checkpoint in training (restoring the default generator and `gen`, which its
// dropouts draw from, for the recompute); the block must then outlive the backward.
class LOOM_API GptBlock : public Module {
 public:
  GptBlock(const GptConfig& config, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GptBlock"; }

 private:
  Tensor run(const Tensor& x);  // the block's math
  bool checkpointing_;
  std::optional<Generator> gen_;
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<GptMlp> mlp_;
};

// Options of Gpt::generate.
struct SampleOptions {
  int64_t max_new_tokens = 100;
  double temperature = 1.0;  // > 0; logits are divided by it
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  Generator* gen = nullptr;  // draws (null: the default generator)
};

class LOOM_API Gpt : public Module {
 public:
  explicit Gpt(const GptConfig& config, Generator* gen = nullptr);
  // Token ids (B, T) of int64 (or int32), T <= block_size -> logits (B, T, vocab_size). IndexError
  // naming the position when an id is out of range, ValueError when T > block_size.
  Tensor forward(const Tensor& idx) override;
  // Mean cross-entropy of the next-token logits against `targets` (B, T).
  Tensor loss(const Tensor& idx, const Tensor& targets);
  // Appends max_new_tokens sampled tokens to `idx` (B, T), each from the softmax of the last
  // position's logits / temperature over the top_k, conditioning on the last block_size tokens;
  // runs in evaluation mode without grad and restores the mode. Returns (B, T + max_new_tokens).
  Tensor generate(const Tensor& idx, const SampleOptions& options = {});
  std::string name() const override;
  const GptConfig& config() const { return config_; }
  // The parameters as Hugging Face's GPT2LMHeadModel names and lays them out: the same names, the
  // Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed to (in, out), and
  // lm_head.weight, the token embedding it is tied to. Detached contiguous copies, on the model's
  // device.
  std::vector<std::pair<std::string, Tensor>> hf_state_dict() const;

 private:
  GptConfig config_;
  std::shared_ptr<Module> transformer_;  // wte, wpe, drop, h (Sequential of GptBlock), ln_f
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<Sequential> h_;
  std::shared_ptr<LayerNorm> ln_f_;
};

}  // namespace loom::nn
