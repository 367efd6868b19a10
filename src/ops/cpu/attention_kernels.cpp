// CPU kernels of _flash_attention and _flash_attention_backward (Note [Attention backends] in
// attention.cpp; Note [Flash attention on the CPU] below).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "loom/parallel.h"
#include "ops/op_call.h"
#include "ops/reduce_engine.h"
#include "ops/shapes.h"
#include "ops/structured.h"

namespace loom {
namespace {

// Note [Flash attention on the CPU]
// The forward takes one (batch, head) and a block of kBq query rows at a time and walks the key
// blocks (kBk keys) that the causal mask leaves visible. Per block it computes the scores S = q k^T
// (the key block transposed once, so the inner loop runs along keys and vectorises), and keeps per
// query row the running max m, the running sum l of exp(s - m) and the unnormalised output acc:
// a new block with max m' rescales l and acc by exp(m - m') before adding its own terms (the
// online softmax). At the end out = acc / l and lse = m + log(l). Only kBq x kBk scores exist at a
// time. 16-bit inputs are converted to float per block; float64 computes in double.
// The backward, per (batch, head) and key block, walks the query blocks that see it and rebuilds
// P = exp(S - lse) from the saved lse; with delta_i = sum_d dO_id O_id:
//   dV += P^T dO,  dP = dO V^T,  dS = P (dP - delta),  dQ += scale dS K,  dK += scale dS^T Q.
// (batch, head) pairs run in parallel; within one, blocks run in order, so results do not depend
// on the number of threads.
constexpr int64_t kBq = 32;
constexpr int64_t kBk = 64;

template <class T, class A>
void load_rows(const T* base, int64_t row_stride, int64_t rows, int64_t d, A* dst) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < d; ++c) dst[r * d + c] = convert<A>(base[r * row_stride + c]);
}

template <class A>
inline A exp_acc(A x) {
  if constexpr (std::is_same_v<A, float>) {
    return reduce::exp_f32(x);
  } else {
    return std::exp(x);
  }
}

// The first key index query i may not see (keys [0, limit) are visible).
inline int64_t key_limit(bool causal, int64_t i, int64_t tk) {
  return causal ? std::min(i + 1, tk) : tk;
}

struct Geometry {
  int64_t b, h, tq, tk, d;
  // Element strides (batch, head, row) of q, k, v; the last dim is contiguous.
  int64_t q_s[3], k_s[3], v_s[3];
};

Geometry geometry_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  Geometry g{q.size(0), q.size(1), q.size(2), k.size(2), q.size(3), {}, {}, {}};
  for (int i = 0; i < 3; ++i) {
    g.q_s[i] = q.stride(i);
    g.k_s[i] = k.stride(i);
    g.v_s[i] = v.stride(i);
  }
  return g;
}

// A contiguous tensor to compute an output in: the output itself when contiguous, else a buffer
// copied into it afterwards (Note [Attention layouts] in attention.cpp).
Tensor contiguous_target(const Tensor& out) {
  return out.is_contiguous() ? out : empty_tensor(out.sizes(), out.dtype(), out.device());
}
void copy_back(const Tensor& out, const Tensor& computed) {
  if (!computed.is_same(out)) out.copy_(computed);
}

// q, k, v with a contiguous last dim (else a contiguous copy).
Tensor last_dim_contiguous(const Tensor& t) {
  return t.stride(3) == 1 || t.size(3) == 1 ? t : t.contiguous();
}

template <class T, class A>
void forward_one(const Geometry& g, const T* qp, const T* kp, const T* vp, T* op, A* lse,
                 bool causal, A scale) {
  const int64_t d = g.d;
  std::vector<A> q(kBq * d), kt(d * kBk), v(kBk * d), s(kBq * kBk), acc(kBq * d), m(kBq), l(kBq);
  for (int64_t i0 = 0; i0 < g.tq; i0 += kBq) {
    const int64_t nq = std::min(kBq, g.tq - i0);
    load_rows(qp + i0 * g.q_s[2], g.q_s[2], nq, d, q.data());
    for (A& x : q) x *= scale;
    std::fill(acc.begin(), acc.end(), A(0));
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    std::fill(l.begin(), l.end(), A(0));
    const int64_t kend = key_limit(causal, i0 + nq - 1, g.tk);
    for (int64_t j0 = 0; j0 < kend; j0 += kBk) {
      const int64_t nk = std::min(kBk, kend - j0);
      for (int64_t j = 0; j < nk; ++j)
        for (int64_t c = 0; c < d; ++c) kt[c * kBk + j] = convert<A>(kp[(j0 + j) * g.k_s[2] + c]);
      load_rows(vp + j0 * g.v_s[2], g.v_s[2], nk, d, v.data());
      for (int64_t i = 0; i < nq; ++i) {
        A* srow = s.data() + i * kBk;
        std::fill(srow, srow + nk, A(0));
        for (int64_t c = 0; c < d; ++c) {
          const A qc = q[i * d + c];
          const A* kr = kt.data() + c * kBk;
          for (int64_t j = 0; j < nk; ++j) srow[j] += qc * kr[j];
        }
        const int64_t visible = std::min(nk, key_limit(causal, i0 + i, g.tk) - j0);
        if (visible <= 0) continue;
        A mx = m[i];
        for (int64_t j = 0; j < visible; ++j) mx = std::max(mx, srow[j]);
        const A correction = exp_acc(m[i] - mx);
        A total = 0;
        for (int64_t j = 0; j < visible; ++j) {
          srow[j] = exp_acc(srow[j] - mx);
          total += srow[j];
        }
        l[i] = l[i] * correction + total;
        m[i] = mx;
        A* a = acc.data() + i * d;
        for (int64_t c = 0; c < d; ++c) a[c] *= correction;
        for (int64_t j = 0; j < visible; ++j) {
          const A p = srow[j];
          const A* vr = v.data() + j * d;
          for (int64_t c = 0; c < d; ++c) a[c] += p * vr[c];
        }
      }
    }
    for (int64_t i = 0; i < nq; ++i) {
      // A row that sees no key (only with an empty key) gets zeros, as the composed path does.
      const A inv = l[i] > 0 ? A(1) / l[i] : A(0);
      T* orow = op + (i0 + i) * d;
      for (int64_t c = 0; c < d; ++c) orow[c] = convert<T>(acc[i * d + c] * inv);
      lse[i0 + i] = l[i] > 0 ? m[i] + std::log(l[i]) : -std::numeric_limits<A>::infinity();
    }
  }
}

void flash_attention_loop(const std::array<Tensor, 2>& outs, const Tensor& query, const Tensor& key,
                          const Tensor& value, bool is_causal, double scale) {
  const Tensor q = last_dim_contiguous(query), k = last_dim_contiguous(key),
               v = last_dim_contiguous(value);
  const Geometry g = geometry_of(q, k, v);
  if (g.b * g.h * g.tq == 0) return;
  const Tensor out = contiguous_target(outs[0]);
  LOOM_DISPATCH_FLOAT_TYPES(q.dtype(), "_flash_attention", [&] {
    using A = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    A* lp = outs[1].data_ptr<A>();
    parallel_for(0, g.b * g.h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t bi = bh / g.h, hi = bh % g.h;
        forward_one<scalar_t, A>(g, qp + bi * g.q_s[0] + hi * g.q_s[1],
                                 kp + bi * g.k_s[0] + hi * g.k_s[1],
                                 vp + bi * g.v_s[0] + hi * g.v_s[1], op + bh * g.tq * g.d,
                                 lp + bh * g.tq, is_causal, static_cast<A>(scale));
      }
    });
  });
  copy_back(outs[0], out);
}

template <class T, class A>
void backward_one(const Geometry& g, const T* gop, const T* qp, const T* kp, const T* vp,
                  const T* op, const A* lse, T* dqp, T* dkp, T* dvp, bool causal, A scale) {
  const int64_t d = g.d;
  std::vector<A> dq(g.tq * d, A(0)), delta(g.tq);
  for (int64_t i = 0; i < g.tq; ++i) {
    A t = 0;
    for (int64_t c = 0; c < d; ++c) t += convert<A>(gop[i * d + c]) * convert<A>(op[i * d + c]);
    delta[i] = t;
  }
  std::vector<A> k(kBk * d), kt(d * kBk), v(kBk * d), vt(d * kBk), dk(kBk * d), dv(kBk * d);
  std::vector<A> q(kBq * d), go(kBq * d), p(kBq * kBk), ds(kBq * kBk);
  for (int64_t j0 = 0; j0 < g.tk; j0 += kBk) {
    const int64_t nk = std::min(kBk, g.tk - j0);
    load_rows(kp + j0 * g.k_s[2], g.k_s[2], nk, d, k.data());
    load_rows(vp + j0 * g.v_s[2], g.v_s[2], nk, d, v.data());
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t c = 0; c < d; ++c) {
        kt[c * kBk + j] = k[j * d + c];
        vt[c * kBk + j] = v[j * d + c];
      }
    std::fill(dk.begin(), dk.end(), A(0));
    std::fill(dv.begin(), dv.end(), A(0));
    // Query rows before j0 see none of these keys under the causal mask.
    for (int64_t i0 = causal ? (j0 / kBq) * kBq : 0; i0 < g.tq; i0 += kBq) {
      const int64_t nq = std::min(kBq, g.tq - i0);
      load_rows(qp + i0 * g.q_s[2], g.q_s[2], nq, d, q.data());
      load_rows(gop + i0 * d, d, nq, d, go.data());
      for (int64_t i = 0; i < nq; ++i) {
        A* prow = p.data() + i * kBk;
        A* dsrow = ds.data() + i * kBk;
        const int64_t visible =
            std::max<int64_t>(0, std::min(nk, key_limit(causal, i0 + i, g.tk) - j0));
        std::fill(prow, prow + kBk, A(0));
        std::fill(dsrow, dsrow + kBk, A(0));
        if (visible == 0) continue;
        for (int64_t c = 0; c < d; ++c) {
          const A qc = q[i * d + c];
          const A* kr = kt.data() + c * kBk;
          for (int64_t j = 0; j < visible; ++j) prow[j] += qc * kr[j];
        }
        const A li = lse[i0 + i];
        for (int64_t j = 0; j < visible; ++j) prow[j] = exp_acc(prow[j] * scale - li);
        for (int64_t c = 0; c < d; ++c) {  // dP = dO V^T
          const A gc = go[i * d + c];
          const A* vr = vt.data() + c * kBk;
          for (int64_t j = 0; j < visible; ++j) dsrow[j] += gc * vr[j];
        }
        for (int64_t j = 0; j < visible; ++j)
          dsrow[j] = prow[j] * (dsrow[j] - delta[i0 + i]) * scale;
        // dQ += dS K, dK += dS^T Q, dV += P^T dO.
        A* dqrow = dq.data() + (i0 + i) * d;
        for (int64_t j = 0; j < visible; ++j) {
          const A sj = dsrow[j], pj = prow[j];
          const A* kr = k.data() + j * d;
          A* dkr = dk.data() + j * d;
          A* dvr = dv.data() + j * d;
          const A* qr = q.data() + i * d;
          const A* gr = go.data() + i * d;
          for (int64_t c = 0; c < d; ++c) {
            dqrow[c] += sj * kr[c];
            dkr[c] += sj * qr[c];
            dvr[c] += pj * gr[c];
          }
        }
      }
    }
    for (int64_t j = 0; j < nk; ++j)
      for (int64_t c = 0; c < d; ++c) {
        dkp[(j0 + j) * d + c] = convert<T>(dk[j * d + c]);
        dvp[(j0 + j) * d + c] = convert<T>(dv[j * d + c]);
      }
  }
  for (int64_t i = 0; i < g.tq * d; ++i) dqp[i] = convert<T>(dq[i]);
}

void flash_attention_backward_loop(const std::array<Tensor, 3>& grads, const Tensor& grad_out,
                                   const Tensor& query, const Tensor& key, const Tensor& value,
                                   const Tensor& out, const Tensor& lse, bool is_causal,
                                   double scale) {
  const Tensor q = last_dim_contiguous(query), k = last_dim_contiguous(key),
               v = last_dim_contiguous(value);
  const Tensor go = grad_out.contiguous(), o = out.contiguous(), ls = lse.contiguous();
  const Geometry g = geometry_of(q, k, v);
  if (g.b * g.h == 0 || (g.tq == 0 && g.tk == 0)) return;
  const Tensor gq = contiguous_target(grads[0]), gk = contiguous_target(grads[1]),
               gv = contiguous_target(grads[2]);
  LOOM_DISPATCH_FLOAT_TYPES(q.dtype(), "_flash_attention_backward", [&] {
    using A = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* kp = k.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    const scalar_t* gp = go.data_ptr<scalar_t>();
    const scalar_t* opp = o.data_ptr<scalar_t>();
    const A* lp = ls.data_ptr<A>();
    scalar_t* dq = gq.data_ptr<scalar_t>();
    scalar_t* dk = gk.data_ptr<scalar_t>();
    scalar_t* dv = gv.data_ptr<scalar_t>();
    parallel_for(0, g.b * g.h, 1, [&](int64_t begin, int64_t end) {
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t bi = bh / g.h, hi = bh % g.h;
        backward_one<scalar_t, A>(g, gp + bh * g.tq * g.d, qp + bi * g.q_s[0] + hi * g.q_s[1],
                                  kp + bi * g.k_s[0] + hi * g.k_s[1],
                                  vp + bi * g.v_s[0] + hi * g.v_s[1], opp + bh * g.tq * g.d,
                                  lp + bh * g.tq, dq + bh * g.tq * g.d, dk + bh * g.tk * g.d,
                                  dv + bh * g.tk * g.d, is_causal, static_cast<A>(scale));
      }
    });
  });
  copy_back(grads[0], gq);
  copy_back(grads[1], gk);
  copy_back(grads[2], gv);
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&flash_attention_shape, &flash_attention_loop>::register_cpu(m, "_flash_attention");
  Structured<&flash_attention_backward_shape, &flash_attention_backward_loop>::register_cpu(
      m, "_flash_attention_backward");
}

}  // namespace loom
