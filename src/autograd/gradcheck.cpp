// gradcheck: analytic Jacobians from backward against central finite differences, in float64.
#include <cmath>
#include <sstream>

#include "loom/autograd.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "loom/ops.h"

namespace loom::autograd {
namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Address of the k-th element (row-major order) of a float64 tensor of any layout.
double* element(const Tensor& t, int64_t k) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t s = t.size(d);
    off += (k % s) * t.stride(d);
    k /= s;
  }
  return static_cast<double*>(t.data_ptr()) + off;
}

// Reads and writes one element where it lives (a device tensor's through a copy to the host).
double read_element(const Tensor& t, double* p) {
  if (t.is_cpu()) return *p;
  double v = 0;
  copy_bytes(&v, kCPU, p, t.device(), sizeof v);
  return v;
}
void write_element(const Tensor& t, double* p, double v) {
  if (t.is_cpu()) {
    *p = v;
    return;
  }
  copy_bytes(p, t.device(), &v, kCPU, sizeof v);
}

std::vector<Tensor> float_outputs(const std::vector<Tensor>& outs) {
  std::vector<Tensor> r;
  for (const Tensor& o : outs) {
    if (o.defined() && is_floating(o.dtype())) r.push_back(o);
  }
  return r;
}

// The outputs' values now: an output may be a view of an input, which the next perturbation
// changes.
std::vector<Tensor> output_values(const Fn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> r = float_outputs(fn(inputs));
  for (Tensor& t : r) t = clone(t);
  return r;
}

// J[i][o] is (numel(output o) x numel(input i)), flattened row-major.
using Jacobian = std::vector<std::vector<std::vector<double>>>;

Jacobian numeric(const Fn& fn, const std::vector<Tensor>& inputs, const std::vector<size_t>& diff,
                 const std::vector<Tensor>& outs0, double eps) {
  NoGradGuard ng;
  Jacobian J(diff.size());
  for (size_t a = 0; a < diff.size(); ++a) {
    const Tensor& x = inputs[diff[a]];
    J[a].resize(outs0.size());
    for (size_t o = 0; o < outs0.size(); ++o) J[a][o].assign(outs0[o].numel() * x.numel(), 0.0);
    for (int64_t k = 0; k < x.numel(); ++k) {
      double* p = element(x, k);
      const double orig = read_element(x, p);
      write_element(x, p, orig + eps);
      auto plus = output_values(fn, inputs);
      write_element(x, p, orig - eps);
      auto minus = output_values(fn, inputs);
      write_element(x, p, orig);
      for (size_t o = 0; o < outs0.size(); ++o) {
        auto vp = to_vector<double>(plus[o]);
        auto vm = to_vector<double>(minus[o]);
        for (size_t j = 0; j < vp.size(); ++j)
          J[a][o][j * x.numel() + k] = (vp[j] - vm[j]) / (2 * eps);
      }
    }
  }
  return J;
}

Jacobian analytic(const std::vector<Tensor>& outs, const std::vector<Tensor>& inputs,
                  const std::vector<size_t>& diff) {
  std::vector<Tensor> diff_inputs;
  for (size_t i : diff) diff_inputs.push_back(inputs[i]);
  Jacobian J(diff.size());
  for (size_t a = 0; a < diff.size(); ++a) {
    J[a].resize(outs.size());
    for (size_t o = 0; o < outs.size(); ++o)
      J[a][o].assign(outs[o].numel() * inputs[diff[a]].numel(), 0.0);
  }
  for (size_t o = 0; o < outs.size(); ++o) {
    if (!outs[o].requires_grad()) continue;
    for (int64_t j = 0; j < outs[o].numel(); ++j) {
      std::vector<Tensor> gos;
      for (size_t q = 0; q < outs.size(); ++q) {
        Tensor z = zeros(outs[q].sizes(), outs[q].options());
        if (q == o) z.view({-1}).select(0, j).fill_(1.0);
        gos.push_back(z);
      }
      std::vector<Tensor> usable, usable_go;
      for (size_t q = 0; q < outs.size(); ++q) {
        if (outs[q].requires_grad()) {
          usable.push_back(outs[q]);
          usable_go.push_back(gos[q]);
        }
      }
      auto g =
          grad(usable, diff_inputs, usable_go, /*retain_graph=*/true, false, /*allow_unused=*/true);
      for (size_t a = 0; a < diff.size(); ++a) {
        if (!g[a].defined()) continue;
        auto v = to_vector<double>(g[a]);
        const size_t n = v.size();
        for (size_t k = 0; k < n; ++k) J[a][o][static_cast<size_t>(j) * n + k] = v[k];
      }
    }
  }
  return J;
}

}  // namespace

std::string gradcheck(const Fn& fn, const std::vector<Tensor>& inputs,
                      const GradcheckOptions& opt) {
  std::vector<size_t> diff;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    LOOM_CHECK_TYPE(inputs[i].dtype() == DType::Float64, "[gradcheck] input ", i,
                    " must be float64 (got ", dtype_name(inputs[i].dtype()), ")");
    diff.push_back(i);
  }
  LOOM_CHECK(!diff.empty(), "[gradcheck] no input requires grad");
  auto outs = float_outputs(fn(inputs));
  LOOM_CHECK(!outs.empty(), "[gradcheck] the function has no floating-point output");
  Jacobian A = analytic(outs, inputs, diff);
  Jacobian N = numeric(fn, inputs, diff, outs, opt.eps);
  std::ostringstream report;
  for (size_t a = 0; a < diff.size(); ++a) {
    for (size_t o = 0; o < outs.size(); ++o) {
      const int64_t nin = inputs[diff[a]].numel();
      for (size_t e = 0; e < A[a][o].size(); ++e) {
        const double x = A[a][o][e], y = N[a][o][e];
        if (!(std::abs(x - y) <= opt.atol + opt.rtol * std::abs(y))) {
          report << "Jacobian mismatch for output " << o << " w.r.t. input " << diff[a]
                 << " at (output element " << static_cast<int64_t>(e) / nin << ", input element "
                 << static_cast<int64_t>(e) % nin << "): analytic " << x << ", numerical " << y
                 << "\n";
          return report.str();
        }
      }
    }
  }
  if (opt.check_backward_twice) {
    auto outs2 = float_outputs(fn(inputs));
    Jacobian B = analytic(outs2, inputs, diff);
    if (B != A) return "backward is not reentrant: a second backward gave different gradients\n";
  }
  return std::string();
}

std::string gradgradcheck(const Fn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  std::vector<Tensor> diff_inputs;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) diff_inputs.push_back(t);
  }
  auto outs0 = float_outputs(fn(inputs));
  std::vector<Tensor> vs;
  Generator gen(1234);
  for (const Tensor& o : outs0) vs.push_back(randn(o.sizes(), o.options(), gen));
  Fn g = [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> di;
    for (const Tensor& t : in) {
      if (t.defined() && t.requires_grad()) di.push_back(t);
    }
    auto outs = float_outputs(fn(in));
    if (!GradMode::is_enabled()) {
      // Finite-difference evaluation: gradients still need a graph of the forward.
      AutoGradMode on(true);
      auto o2 = float_outputs(fn(in));
      auto r = grad(o2, di, vs, true, false, true);
      for (size_t i = 0; i < r.size(); ++i)
        r[i] = r[i].defined() ? r[i].detach() : zeros_like(di[i]);
      return r;
    }
    auto r = grad(outs, di, vs, true, /*create_graph=*/true, true);
    for (size_t i = 0; i < r.size(); ++i) {
      if (!r[i].defined()) r[i] = zeros_like(di[i]);
    }
    return r;
  };
  return gradcheck(g, inputs, opt);
}

}  // namespace loom::autograd
