// The derivative registry (ops layer): where operator files declare their derivatives
// (LOOM_DERIVATIVES), and where autograd's recording looks them up (find_derivative). Also the two
// helpers that derivatives share: sum_to and as_strided_backward, written with dispatched
// operators.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/derivatives.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::autograd {

// ---- registry ----

namespace {
struct Registry {
  std::unordered_map<std::string, Derivative> by_name;
  std::unordered_map<std::string, std::string> aliases;
};
Registry& registry() {
  static Registry r;
  return r;
}
const char* g_current_file = "";
}  // namespace

DerivativeRegistrar& DerivativeRegistrar::def(const char* op, DerivativeSpec spec,
                                              DerivativeFn fn) {
  Derivative d;
  d.op = op;
  d.spec = std::move(spec);
  d.fn = fn;
  d.file = g_current_file;
  auto [it, inserted] = registry().by_name.emplace(op, std::move(d));
  LOOM_INTERNAL_ASSERT(inserted, "derivative of ", op, " declared twice (", it->second.file, ")");
  return *this;
}

DerivativeRegistrar& DerivativeRegistrar::nondifferentiable(const char* op) {
  Derivative d;
  d.op = op;
  d.differentiable = false;
  d.file = g_current_file;
  registry().by_name.emplace(op, std::move(d));
  return *this;
}

DerivativeRegistrar& DerivativeRegistrar::alias(const char* op, const char* same_as) {
  registry().aliases.emplace(op, same_as);
  return *this;
}

detail::DerivativesInit::DerivativesInit(void (*init)(DerivativeRegistrar&), const char* file) {
  g_current_file = file;
  DerivativeRegistrar r;
  init(r);
  g_current_file = "";
}

const Derivative* find_derivative(const std::string& op_name) {
  auto& reg = registry();
  auto it = reg.by_name.find(op_name);
  if (it != reg.by_name.end()) return &it->second;
  auto al = reg.aliases.find(op_name);
  if (al != reg.aliases.end()) return find_derivative(al->second);
  // "mul_" and "mul_.Scalar" use "mul" / "mul.Scalar"; "add.out" uses "add".
  std::string name = op_name, overload;
  if (auto dot = name.find('.'); dot != std::string::npos) {
    overload = name.substr(dot);
    name = name.substr(0, dot);
  }
  if (!name.empty() && name.back() == '_') {
    name.pop_back();
    if (auto d = reg.by_name.find(name + overload); d != reg.by_name.end()) return &d->second;
    if (auto d = reg.by_name.find(name); d != reg.by_name.end()) return &d->second;
  }
  if (overload == ".out") {
    if (auto d = reg.by_name.find(name); d != reg.by_name.end()) return &d->second;
  }
  return nullptr;
}

std::vector<const Derivative*> all_derivatives() {
  std::vector<const Derivative*> out;
  for (auto& [k, v] : registry().by_name) out.push_back(&v);
  return out;
}

Tensor sum_to(const Tensor& grad, IntArrayRef sizes) {
  if (!grad.defined() || grad.sizes() == sizes) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(sizes.size());
  LOOM_CHECK(lead >= 0, "[autograd] cannot sum a gradient of shape ", grad.shape_str(),
             " to the larger shape ", IntArrayRef(sizes));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    const int64_t gs = grad.size(lead + i);
    if (sizes[static_cast<size_t>(i)] == 1 && gs != 1) {
      dims.push_back(lead + i);
    } else {
      LOOM_CHECK(sizes[static_cast<size_t>(i)] == gs, "[autograd] cannot sum a gradient of shape ",
                 grad.shape_str(), " to shape ", IntArrayRef(sizes));
    }
  }
  Tensor r = dims.empty() ? grad : sum(grad, IntArrayRef(dims), /*keepdim=*/true);
  return r.sizes() == sizes ? r : r.view(sizes);
}

namespace {
// One past the largest storage position a geometry reaches (its offset when it has no elements).
int64_t storage_end(IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  int64_t end = offset + 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return offset;
    end += (sizes[i] - 1) * strides[i];
  }
  return end;
}

// Whether two elements of a geometry can share a storage position: dims sorted by stride must each
// step past everything the smaller dims reach.
bool may_overlap(IntArrayRef sizes, IntArrayRef strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of dims with size > 1
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1) dims.emplace_back(strides[i], sizes[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (auto [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += (size - 1) * stride;
  }
  return false;
}
}  // namespace

Tensor as_strided_backward(const Tensor& grad, IntArrayRef input_sizes, IntArrayRef input_strides,
                           int64_t input_offset, IntArrayRef sizes, IntArrayRef strides,
                           int64_t offset) {
  const int64_t input_numel = multiply_sizes(input_sizes);
  if (grad.numel() == 0 || input_numel == 0) return zeros(input_sizes, grad.options());
  // Storage positions [lo, hi) cover both the input and the view; positions are relative to lo.
  const int64_t lo = std::min(input_offset, offset);
  const int64_t hi = std::max(storage_end(input_sizes, input_strides, input_offset),
                              storage_end(sizes, strides, offset));
  const Tensor positions = arange(hi - lo, TensorOptions(kInt64).with_device(grad.device()));
  const Tensor view_pos = as_strided(positions, sizes, strides, offset - lo).reshape({-1});
  const Tensor input_pos =
      as_strided(positions, input_sizes, input_strides, input_offset - lo).reshape({-1});
  const Tensor storage =
      scatter_add(zeros({hi - lo}, grad.options()), 0, view_pos, grad.reshape({-1}));
  Tensor r = index_select(storage, 0, input_pos);
  if (may_overlap(input_sizes, input_strides)) {
    const Tensor count = scatter_add(zeros({hi - lo}, grad.options()), 0, input_pos,
                                     ones({input_numel}, grad.options()));
    r = div(r, index_select(count, 0, input_pos));
  }
  return r.view(input_sizes);
}

}  // namespace loom::autograd
