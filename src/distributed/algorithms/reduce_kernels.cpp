// reduce_into: dst[i] = op(dst[i], src[i]) for every dtype (declared in dist/algorithms.h).
//
// Integers wrap like C++ unsigned arithmetic (computed in unsigned types, never signed overflow).
// Bool: SUM and MAX are or, PROD and MIN are and. Float MIN/MAX propagate NaN like torch.minimum.
// f16/bf16 go through float per element; the group only sends them here for MIN/MAX (a result that
// is one of the inputs, so those two just pick the bits).
#include <type_traits>

#include "distributed/algorithms/algorithms.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

// One element-wise loop per (type, op): plain enough for the compiler to vectorise.
template <class T, class F>
void apply(void* dst, const void* src, size_t n, F f) {
  T* __restrict d = static_cast<T*>(dst);
  const T* __restrict s = static_cast<const T*>(src);
  for (size_t i = 0; i < n; ++i) d[i] = f(d[i], s[i]);
}

template <class T>
void reduce_integer(void* d, const void* s, size_t n, ReduceOp op) {
  // Narrow types promote to int, where a product can overflow; widen them to unsigned instead.
  using W = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  switch (op) {
    case ReduceOp::Sum:
      apply<T>(d, s, n,
               [](T a, T b) { return static_cast<T>(static_cast<W>(a) + static_cast<W>(b)); });
      return;
    case ReduceOp::Prod:
      apply<T>(d, s, n,
               [](T a, T b) { return static_cast<T>(static_cast<W>(a) * static_cast<W>(b)); });
      return;
    case ReduceOp::Min:
      apply<T>(d, s, n, [](T a, T b) { return b < a ? b : a; });
      return;
    case ReduceOp::Max:
      apply<T>(d, s, n, [](T a, T b) { return b > a ? b : a; });
      return;
    case ReduceOp::Avg:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] reduce_into got op ", static_cast<int>(op));
}

void reduce_bool(void* d, const void* s, size_t n, ReduceOp op) {
  // Bytes holding 0 or 1: or/and on the bytes keep them 0 or 1.
  if (op == ReduceOp::Sum || op == ReduceOp::Max) {
    apply<uint8_t>(d, s, n, [](uint8_t a, uint8_t b) { return static_cast<uint8_t>(a | b); });
  } else {
    apply<uint8_t>(d, s, n, [](uint8_t a, uint8_t b) { return static_cast<uint8_t>(a & b); });
  }
}

template <class T>
void reduce_float(void* d, const void* s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      apply<T>(d, s, n, [](T a, T b) { return a + b; });
      return;
    case ReduceOp::Prod:
      apply<T>(d, s, n, [](T a, T b) { return a * b; });
      return;
    case ReduceOp::Min:
      apply<T>(d, s, n, [](T a, T b) { return (b < a || b != b) ? b : a; });
      return;
    case ReduceOp::Max:
      apply<T>(d, s, n, [](T a, T b) { return (b > a || b != b) ? b : a; });
      return;
    case ReduceOp::Avg:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] reduce_into got op ", static_cast<int>(op));
}

// Half and BFloat16: arithmetic in float, rounded once per element.
template <class T>
void reduce_reduced_float(void* d, const void* s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      apply<T>(d, s, n, [](T a, T b) { return T(float(a) + float(b)); });
      return;
    case ReduceOp::Prod:
      apply<T>(d, s, n, [](T a, T b) { return T(float(a) * float(b)); });
      return;
    case ReduceOp::Min:
      apply<T>(d, s, n, [](T a, T b) {
        float fa = a, fb = b;
        return (fb < fa || fb != fb) ? b : a;
      });
      return;
    case ReduceOp::Max:
      apply<T>(d, s, n, [](T a, T b) {
        float fa = a, fb = b;
        return (fb > fa || fb != fb) ? b : a;
      });
      return;
    case ReduceOp::Avg:
      break;
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] reduce_into got op ", static_cast<int>(op));
}

}  // namespace

static_assert(kNumDTypes == 10, "reduce_into has a case for every dtype");

void reduce_into(void* dst, const void* src, size_t n, DType dt, ReduceOp op) {
  LOOM_INTERNAL_ASSERT(op != ReduceOp::Avg,
                       "[dist] AVG must be lowered to SUM and a division before reduce_into");
  if (n == 0) return;
  switch (dt) {
    case DType::Bool:
      return reduce_bool(dst, src, n, op);
    case DType::UInt8:
      return reduce_integer<uint8_t>(dst, src, n, op);
    case DType::Int8:
      return reduce_integer<int8_t>(dst, src, n, op);
    case DType::Int16:
      return reduce_integer<int16_t>(dst, src, n, op);
    case DType::Int32:
      return reduce_integer<int32_t>(dst, src, n, op);
    case DType::Int64:
      return reduce_integer<int64_t>(dst, src, n, op);
    case DType::Float16:
      return reduce_reduced_float<Half>(dst, src, n, op);
    case DType::BFloat16:
      return reduce_reduced_float<BFloat16>(dst, src, n, op);
    case DType::Float32:
      return reduce_float<float>(dst, src, n, op);
    case DType::Float64:
      return reduce_float<double>(dst, src, n, op);
  }
  LOOM_INTERNAL_ASSERT(false, "[dist] reduce_into got dtype ", static_cast<int>(dt));
}

}  // namespace loom::dist
