// Fused SGD and Adam updates (see fused_step.h).
//
// Note [Optimizer arithmetic]: every line mirrors one operator of PyTorch's single-tensor path, in
// the same order, with scalars rounded to T first. libtorch's CPU kernels (AVX2 / AVX-512 builds,
// which contract `a + alpha * b` into one fused multiply-add) compute `a.add_(b, alpha)` as
// fma(alpha, b, a) and `a.addcmul_(b, c, value)` as fma(value * b, c, a); `addcdiv_(b, c, value)`
// is a + value * b / c and has nothing to fuse. Writing those fma calls explicitly makes the fused
// updates bit-identical to torch.optim's (checked against PyTorch 1.13 in
// tests/nn/torch_compare_test.cpp). The operator fallback in sgd.cpp / adam.cpp uses loom's add,
// which does not fuse, so it can differ from this path in the last bit; a run always takes the same
// path for a given parameter, so resuming stays exact.
#include "optim/fused_step.h"

#include <cmath>

#include "loom/parallel.h"

namespace loom::optim::detail {
namespace {

constexpr int64_t kGrain = 1 << 15;

// fma where the hardware has one (libtorch's kernels fuse there too), else a * b + c.
template <class T>
inline T fmadd(T a, T b, T c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

bool eligible(const Tensor& t, DType dtype, int64_t numel) {
  return !t.defined() ||
         (t.is_cpu() && t.dtype() == dtype && t.is_contiguous() && t.numel() == numel);
}

bool eligible_all(const Tensor& param, std::initializer_list<const Tensor*> others) {
  if (!param.is_cpu() || !param.is_contiguous()) return false;
  const DType dt = param.dtype();
  if (dt != kFloat32 && dt != kFloat64) return false;
  for (const Tensor* t : others) {
    if (!eligible(*t, dt, param.numel())) return false;
  }
  return true;
}

void bump(const Tensor& t) {
  if (t.defined()) t.storage()->bump_version();
}

// The loops are specialised on the branches PyTorch takes per tensor (weight decay, momentum state,
// amsgrad) so that each compiles to straight vector code; the remaining choices are selects.
enum class Momentum { kNone, kFirst, kUpdate };

template <class T, bool kWeightDecay, Momentum kMomentum>
void sgd_loop(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t begin, int64_t end,
              T grad_sign, T wd, T mom, T one_minus_damp, T neg_lr, bool nesterov) {
  for (int64_t i = begin; i < end; ++i) {
    T d = g[i] * grad_sign;  // exact: maximize negates
    if constexpr (kWeightDecay) d = fmadd(wd, p[i], d);
    if constexpr (kMomentum != Momentum::kNone) {
      const T b = kMomentum == Momentum::kFirst ? d : fmadd(one_minus_damp, d, buf[i] * mom);
      buf[i] = b;
      d = nesterov ? fmadd(mom, b, d) : b;
    }
    p[i] = fmadd(neg_lr, d, p[i]);
  }
}

template <class T, bool kWeightDecay, Momentum kMomentum>
void sgd_run(T* p, const T* g, T* buf, int64_t n, const SGDStepArgs& a) {
  const T grad_sign = a.maximize ? T(-1) : T(1), wd = static_cast<T>(a.weight_decay);
  const T mom = static_cast<T>(a.momentum), one_minus_damp = static_cast<T>(1.0 - a.dampening);
  const T neg_lr = static_cast<T>(-a.lr);
  const bool nesterov = a.nesterov;
  parallel_for(0, n, kGrain, [=](int64_t begin, int64_t end) {
    sgd_loop<T, kWeightDecay, kMomentum>(p, g, buf, begin, end, grad_sign, wd, mom, one_minus_damp,
                                         neg_lr, nesterov);
  });
}

template <class T, bool kWeightDecay>
void sgd_kernel_wd(T* p, const T* g, T* buf, int64_t n, const SGDStepArgs& a) {
  if (a.momentum == 0.0) {
    sgd_run<T, kWeightDecay, Momentum::kNone>(p, g, buf, n, a);
  } else if (a.first) {
    sgd_run<T, kWeightDecay, Momentum::kFirst>(p, g, buf, n, a);
  } else {
    sgd_run<T, kWeightDecay, Momentum::kUpdate>(p, g, buf, n, a);
  }
}

template <class T>
void sgd_kernel(T* p, const T* g, T* buf, int64_t n, const SGDStepArgs& a) {
  if (a.weight_decay != 0.0) {
    sgd_kernel_wd<T, true>(p, g, buf, n, a);
  } else {
    sgd_kernel_wd<T, false>(p, g, buf, n, a);
  }
}

template <class T>
struct AdamScalars {
  T grad_sign, b1, b2, one_minus_b1, one_minus_b2, wd, decay, bc2_sqrt, eps, neg_step_size;
};

template <class T, bool kCoupledWeightDecay, bool kAmsgrad>
void adam_loop(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
               T* __restrict vmax, int64_t begin, int64_t end, const AdamScalars<T> s) {
  for (int64_t i = begin; i < end; ++i) {
    const T pi = p[i] * s.decay;  // AdamW's decoupled decay; exact (decay = 1) otherwise
    T gi = g[i] * s.grad_sign;
    if constexpr (kCoupledWeightDecay) gi = fmadd(s.wd, pi, gi);
    const T mi = fmadd(s.one_minus_b1, gi, m[i] * s.b1);
    const T vi = fmadd(s.one_minus_b2 * gi, gi, v[i] * s.b2);
    m[i] = mi;
    v[i] = vi;
    T vhat = vi;
    if constexpr (kAmsgrad) {
      vhat = (vmax[i] < vi || vi != vi) ? vi : vmax[i];  // torch.maximum: NaN wins
      vmax[i] = vhat;
    }
    const T denom = std::sqrt(vhat) / s.bc2_sqrt + s.eps;
    p[i] = pi + s.neg_step_size * mi / denom;
  }
}

template <class T, bool kCoupledWeightDecay, bool kAmsgrad>
void adam_run(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamScalars<T>& s) {
  parallel_for(0, n, kGrain, [=](int64_t begin, int64_t end) {
    adam_loop<T, kCoupledWeightDecay, kAmsgrad>(p, g, m, v, vmax, begin, end, s);
  });
}

template <class T>
void adam_kernel(T* p, const T* g, T* m, T* v, T* vmax, int64_t n, const AdamStepArgs& a) {
  AdamScalars<T> s;
  s.grad_sign = a.maximize ? T(-1) : T(1);
  s.b1 = static_cast<T>(a.beta1);
  s.b2 = static_cast<T>(a.beta2);
  s.one_minus_b1 = static_cast<T>(1.0 - a.beta1);
  s.one_minus_b2 = static_cast<T>(1.0 - a.beta2);
  s.wd = static_cast<T>(a.weight_decay);
  s.decay = a.decoupled ? static_cast<T>(1.0 - a.lr * a.weight_decay) : T(1);
  s.bc2_sqrt = static_cast<T>(a.bias_correction2_sqrt);
  s.eps = static_cast<T>(a.eps);
  s.neg_step_size = static_cast<T>(-a.step_size);
  const bool coupled = !a.decoupled && a.weight_decay != 0.0;
  if (coupled) {
    vmax ? adam_run<T, true, true>(p, g, m, v, vmax, n, s)
         : adam_run<T, true, false>(p, g, m, v, vmax, n, s);
  } else {
    vmax ? adam_run<T, false, true>(p, g, m, v, vmax, n, s)
         : adam_run<T, false, false>(p, g, m, v, vmax, n, s);
  }
}

}  // namespace

bool sgd_step_fused(const Tensor& param, const Tensor& grad, const Tensor& buf,
                    const SGDStepArgs& args) {
  if (!grad.defined() || !eligible_all(param, {&grad, &buf})) return false;
  if (args.momentum != 0.0 && !buf.defined()) return false;
  const int64_t n = param.numel();
  if (param.dtype() == kFloat32) {
    sgd_kernel<float>(param.data_ptr<float>(), grad.data_ptr<float>(),
                      buf.defined() ? buf.data_ptr<float>() : nullptr, n, args);
  } else {
    sgd_kernel<double>(param.data_ptr<double>(), grad.data_ptr<double>(),
                       buf.defined() ? buf.data_ptr<double>() : nullptr, n, args);
  }
  bump(param);
  bump(buf);
  return true;
}

bool adam_step_fused(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                     const Tensor& exp_avg_sq, const Tensor& max_exp_avg_sq,
                     const AdamStepArgs& args) {
  if (!grad.defined() || !exp_avg.defined() || !exp_avg_sq.defined()) return false;
  if (!eligible_all(param, {&grad, &exp_avg, &exp_avg_sq, &max_exp_avg_sq})) return false;
  const int64_t n = param.numel();
  if (param.dtype() == kFloat32) {
    adam_kernel<float>(param.data_ptr<float>(), grad.data_ptr<float>(), exp_avg.data_ptr<float>(),
                       exp_avg_sq.data_ptr<float>(),
                       max_exp_avg_sq.defined() ? max_exp_avg_sq.data_ptr<float>() : nullptr, n,
                       args);
  } else {
    adam_kernel<double>(param.data_ptr<double>(), grad.data_ptr<double>(),
                        exp_avg.data_ptr<double>(), exp_avg_sq.data_ptr<double>(),
                        max_exp_avg_sq.defined() ? max_exp_avg_sq.data_ptr<double>() : nullptr, n,
                        args);
  }
  bump(param);
  bump(exp_avg);
  bump(exp_avg_sq);
  bump(max_exp_avg_sq);
  return true;
}

}  // namespace loom::optim::detail
