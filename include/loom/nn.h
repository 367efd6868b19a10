// Neural-network modules (nn layer): the Module base class, the standard layers, and the losses,
// with PyTorch's (torch.nn) names, arguments, defaults and initialisation.
//
// Ownership: a Module owns its parameters, buffers and child modules; children are held by
// shared_ptr, so one module may appear in several parents (its parameters are then listed once by
// named_parameters). Parameters are leaf tensors that require grad. Accessors return tensor handles
// (which share storage), never copies. Module::to(dtype) replaces parameters with new tensors:
// build optimizers after it. Thread-safety: forward() may run on several threads at once (Dropout
// draws from a locked Generator); anything that changes a module (register_*, train/eval, to,
// zero_grad, load_state_dict) must not race with any other use of it.
//
// Errors: each forward() checks its input against the module's configuration and throws ValueError
// (shapes) or TypeError (dtypes) starting with "[<module name>]", e.g.
// "[Linear(784 -> 256)] input has 780 features in its last dimension, expected 784 (input shape
// [128, 780])".
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/generator.h"
#include "loom/nn/init.h"
#include "loom/ops.h"
#include "loom/tensor.h"

namespace loom::nn {

// Named tensors in a fixed order; the same type as io::TensorMap, so a state dict can be written
// with io::save_safetensors and read back with io::load_safetensors(...).tensors.
using StateDict = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict(strict = false) skipped.
struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, absent from the state dict
  std::vector<std::string> unexpected_keys;  // in the state dict, absent from the module
};

class LOOM_API Module {
 public:
  Module() = default;
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation. The base class throws NotImplementedError (containers and modules with other
  // signatures do not override it).
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  // Short description used in error messages: "Linear(784 -> 256)", "Conv2d(3, 16, kernel_size=[3,
  // 3], stride=[1, 1])". The base class returns "Module".
  virtual std::string name() const;

  // Parameters in registration order, this module's first, then each child's with its name as a
  // prefix ("0.weight", "encoder.1.bias"). A tensor reachable under several names is listed once.
  std::vector<std::pair<std::string, Tensor>> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  // Buffers (persistent or not) in the same order.
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // This module (name "") and every descendant, in pre-order (a module reachable along several
  // paths appears under each); the pointers are valid while this module lives.
  std::vector<std::pair<std::string, Module*>> named_modules() const;

  // Registers a parameter: `value` must be a defined floating-point leaf tensor; it is made to
  // require grad (unless requires_grad is false) and is returned. Names must be non-empty, contain
  // no
  // '.', and be unique among this module's parameters, buffers and children (ValueError otherwise).
  Tensor register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  // Registers a buffer (state that is not trained, e.g. running statistics). Non-persistent buffers
  // are left out of state_dict.
  Tensor register_buffer(const std::string& name, Tensor value, bool persistent = true);
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // This module's own parameter or buffer by name (ValueError naming the module if absent).
  const Tensor& parameter(std::string_view name) const;
  const Tensor& buffer(std::string_view name) const;

  // Training mode (the default) or evaluation mode, for this module and all descendants.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Clears the gradients of all parameters: drops them (set_to_none) or fills them with zeros.
  void zero_grad(bool set_to_none = true);

  // Converts floating-point parameters and buffers (and gradients) to `dtype`, recursively, as
  // torch.nn.Module.to(dtype). Parameters become new tensors: optimizers built before hold the old
  // ones.
  Module& to(DType dtype);
  // Moves parameters, buffers and gradients to `device`, recursively, as
  // torch.nn.Module.to(device): each parameter stays a leaf with its requires_grad, in the same
  // slot (so a subclass's slot index, a shared child and named_parameters() see the moved tensor),
  // but it is a new tensor: as with to(dtype), build optimizers (and anything else that holds
  // parameter handles) after it. Tensors already on `device` are kept as they are.
  Module& to(Device device);

  // Parameters (detached, sharing storage) and persistent buffers by dotted name, in PyTorch's
  // order: pre-order over modules, each module's own parameters, then its own buffers, then its
  // children.
  StateDict state_dict() const;
  // Copies the tensors of `state` into this module's parameters and buffers (in place: tensor
  // handles held elsewhere, e.g. by optimizers, stay valid). Every key is validated before anything
  // is copied: a shape mismatch throws ValueError, a dtype mismatch TypeError, both naming the key
  // and the two shapes or dtypes. With strict, missing or unexpected keys throw ValueError listing
  // them.
  LoadStateDictResult load_state_dict(const StateDict& state, bool strict = true);
  LoadStateDictResult load_state_dict(const std::map<std::string, Tensor>& state,
                                      bool strict = true);

 protected:
  // Slot-based access for subclasses: add_parameter returns an index that stays valid for the
  // module's lifetime (to() replaces the tensor in the slot, so subclasses keep the index, not a
  // copy).
  size_t add_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  const Tensor& parameter_at(size_t slot) const { return params_[slot].second; }
  void add_child(const std::string& name, std::shared_ptr<Module> module);

 private:
  struct BufferSlot {
    std::string name;
    Tensor value;
    bool persistent = true;
  };
  void check_new_name(const std::string& name, const char* what) const;
  void collect_modules(const std::string& prefix,
                       std::vector<std::pair<std::string, Module*>>& out) const;

  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<BufferSlot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A pair of sizes (height, width) given as one number or two: Conv2d(3, 16, 3) or Conv2d(3, 16, {3,
// 5}).
struct Size2 {
  int64_t h = 0, w = 0;
  Size2(int64_t v) : h(v), w(v) {}  // NOLINT: implicit, like PyTorch's int-or-tuple arguments
  Size2(int64_t h_, int64_t w_) : h(h_), w(w_) {}
};

// y = x W^T + b. weight (out, in) ~ kaiming_uniform(a = sqrt(5)), i.e. U(-1/sqrt(in), 1/sqrt(in));
// bias (out) ~ U(-1/sqrt(in), 1/sqrt(in)). Input (..., in).
class LOOM_API Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  const Tensor& weight() const { return parameter_at(weight_); }
  // Undefined when built with bias = false.
  const Tensor& bias() const;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  size_t weight_ = 0;
  std::optional<size_t> bias_;
};

// Conv2d's arguments by name: Conv2dOptions o(1, 16, 3); o.padding = 1; Conv2d conv(o, &gen).
struct Conv2dOptions {
  Conv2dOptions(int64_t in_channels_, int64_t out_channels_, Size2 kernel_size_)
      : in_channels(in_channels_), out_channels(out_channels_), kernel_size(kernel_size_) {}
  int64_t in_channels, out_channels;
  Size2 kernel_size;
  Size2 stride = 1;
  Size2 padding = 0;
  Size2 dilation = 1;
  int64_t groups = 1;
  bool bias = true;
};

// 2-D convolution over (N, C, H, W) or (C, H, W) inputs; zero padding. weight (out, in / groups,
// kh, kw) and bias initialised as Linear's with fan_in = in / groups * kh * kw.
class LOOM_API Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1,
         Size2 padding = 0, Size2 dilation = 1, int64_t groups = 1, bool bias = true,
         Generator* gen = nullptr);
  explicit Conv2d(const Conv2dOptions& options, Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  const Tensor& weight() const { return parameter_at(weight_); }
  const Tensor& bias() const;

 private:
  int64_t in_, out_, groups_;
  Size2 kernel_, stride_, padding_, dilation_;
  size_t weight_ = 0;
  std::optional<size_t> bias_;
};

// Max pooling over (N, C, H, W) or (C, H, W); stride defaults to kernel_size.
class LOOM_API MaxPool2d : public Module {
 public:
  MaxPool2d(Size2 kernel_size, std::optional<Size2> stride = std::nullopt, Size2 padding = 0,
            Size2 dilation = 1, bool ceil_mode = false);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  Size2 kernel_, stride_, padding_, dilation_;
  bool ceil_mode_;
};

class LOOM_API ReLU : public Module {
 public:
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "ReLU"; }
};

// approximate: "none" (exact, with erf) or "tanh".
class LOOM_API GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  std::string approximate_;
};

// Zeroes each element with probability p and scales the others by 1 / (1 - p) in training mode;
// identity in evaluation mode. Draws from `gen` (a handle is kept) or the default generator.
class LOOM_API Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  double p() const { return p_; }

 private:
  double p_;
  std::optional<Generator> gen_;
};

// Normalises over the trailing dims `normalized_shape`; weight ones and bias zeros when affine.
class LOOM_API LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5,
                     bool elementwise_affine = true, bool bias = true);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;
  // Undefined without elementwise_affine (bias also without bias).
  const Tensor& weight() const;
  const Tensor& bias() const;

 private:
  std::vector<int64_t> shape_;
  double eps_;
  std::optional<size_t> weight_, bias_;
};

// A lookup table: integer indices (any shape, int64 or int32) -> rows of weight (num, dim),
// initialised N(0, 1). padding_idx (negative counts from the end) selects a row that starts at zero
// and gets no gradient.
class LOOM_API Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt, Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override;
  const Tensor& weight() const { return parameter_at(weight_); }

 private:
  int64_t num_, dim_;
  std::optional<int64_t> padding_idx_;
  size_t weight_ = 0;
};

// Flattens dims start_dim..end_dim (default: all but the batch dim).
class LOOM_API Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& input) override;
  std::string name() const override;

 private:
  int64_t start_, end_;
};

// Runs its children in order; children are named "0", "1", ... unless given a name.
class LOOM_API Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> module);
  void push_back(const std::string& name, std::shared_ptr<Module> module);
  size_t size() const { return named_children().size(); }
  // The i-th child (IndexError when out of range).
  const std::shared_ptr<Module>& operator[](size_t i) const;
  // The i-th child as M (TypeError when it is not one).
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) throw_wrong_type(i);
    return m;
  }
  Tensor forward(const Tensor& input) override;
  std::string name() const override { return "Sequential"; }

 private:
  [[noreturn]] void throw_wrong_type(size_t i) const;
};

// ---- losses (functions, and small callable classes holding the options) ----

// torch.nn.functional.cross_entropy: logits (N, C), (C) or (N, C, d...); target class indices or
// class probabilities shaped like input.
struct CrossEntropyOptions {
  std::optional<Tensor> weight;  // per-class weights (C)
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;  // in [0, 1]
};
LOOM_API Tensor cross_entropy_loss(const Tensor& input, const Tensor& target,
                                   const CrossEntropyOptions& options = {});
class LOOM_API CrossEntropyLoss {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options_(std::move(options)) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return cross_entropy_loss(input, target, options_);
  }

 private:
  CrossEntropyOptions options_;
};

// (input - target)^2, averaged, summed or elementwise. Unlike PyTorch (which broadcasts with a
// warning), different shapes throw ValueError; different dtypes throw TypeError.
LOOM_API Tensor mse_loss(const Tensor& input, const Tensor& target,
                         Reduction reduction = Reduction::Mean);
class LOOM_API MSELoss {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction_(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction_);
  }

 private:
  Reduction reduction_;
};

}  // namespace loom::nn
