// CPU kernel of cat: contiguous inputs of the result's dtype are copied slab by slab; anything else
// goes through copy_ into narrowed views of the result.
#include <algorithm>
#include <cstring>
#include <vector>

#include "loom/parallel.h"
#include "ops/op_call.h"
#include "ops/shapes.h"

namespace loom {
namespace {

// A 1-D tensor of size 0, which cat skips whatever the other shapes are (as cat_shape does).
bool is_legacy_empty(const Tensor& t) {
  return t.dim() == 1 && t.size(0) == 0;
}

// Copies each contiguous input into its slab of a contiguous output of the same dtype: for each of
// `outer` rows, input i contributes sizes[dim] * inner elements.
void cat_contiguous(TensorList tensors, const Tensor& out, int64_t dim) {
  const size_t es = out.element_size();
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= out.size(d);
  const int64_t out_row = out.numel() / (outer == 0 ? 1 : outer) * static_cast<int64_t>(es);
  std::vector<const char*> src;
  std::vector<int64_t> row_bytes, col_offset;
  int64_t col = 0;
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t) || t.numel() == 0) continue;
    src.push_back(static_cast<const char*>(t.data_ptr()));
    row_bytes.push_back(t.numel() / outer * static_cast<int64_t>(es));
    col_offset.push_back(col);
    col += row_bytes.back();
  }
  char* dst = static_cast<char*>(out.data_ptr());
  if (outer == 1) {  // one slab per input (cat along dim 0): split each copy instead
    constexpr int64_t kChunk = 1 << 18;
    for (size_t i = 0; i < src.size(); ++i) {
      const int64_t n = row_bytes[i];
      parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t b, int64_t e) {
        const int64_t lo = b * kChunk, hi = std::min(n, e * kChunk);
        std::memcpy(dst + col_offset[i] + lo, src[i] + lo, static_cast<size_t>(hi - lo));
      });
    }
    return;
  }
  const int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(out_row, 1));
  parallel_for(0, outer, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      for (size_t i = 0; i < src.size(); ++i) {
        std::memcpy(dst + r * out_row + col_offset[i], src[i] + r * row_bytes[i],
                    static_cast<size_t>(row_bytes[i]));
      }
    }
  });
}

void cat_loop(const Tensor& out, TensorList tensors, int64_t dim) {
  if (out.numel() == 0) return;
  const DType dtype = out.dtype();
  const int64_t d = wrap_dim(dim, out.dim(), "cat");

  bool simple = true;
  for (const Tensor& t : tensors) {
    if (!is_legacy_empty(t) && (t.dtype() != dtype || !t.is_contiguous())) simple = false;
  }
  if (simple) {
    cat_contiguous(tensors, out, d);
    return;
  }
  // General case: copy_ casts and walks any strides (and parallelises large copies itself).
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (is_legacy_empty(t)) continue;
    const int64_t n = t.size(d);
    if (n > 0 && t.numel() > 0) copy_(narrow(out, d, offset, n), t);
    offset += n;
  }
}

}  // namespace

LOOM_LIBRARY_IMPL(loom, CPU, m) {
  Structured<&cat_shape, &cat_loop>::register_cpu(m, "cat");
}

}  // namespace loom
