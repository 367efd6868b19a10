#include "grad_utils.h"

#include <algorithm>

namespace loom::grad_utils {

std::vector<int64_t> reduced_dims(const IValue& dim, int64_t rank, const char* op) {
  std::vector<int64_t> dims;
  if (dim.is_int()) {
    dims.push_back(wrap_dim(dim.to_int(), rank, op));
  } else if (dim.is_int_list() && !dim.to_int_list().empty()) {
    for (int64_t d : dim.to_int_list()) dims.push_back(wrap_dim(d, rank, op));
  } else {
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end());
  dims.erase(std::unique(dims.begin(), dims.end()), dims.end());
  return dims;
}

Tensor unsqueeze_reduced(const Tensor& g, int64_t rank, const std::vector<int64_t>& dims,
                         bool keepdim) {
  if (keepdim || rank == 0) return g;
  Tensor r = g;
  for (int64_t d : dims) r = unsqueeze(r, d);  // ascending order keeps positions right
  return r;
}

Tensor unreduce(const Tensor& g, IntArrayRef input_sizes, const std::vector<int64_t>& dims,
                bool keepdim) {
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  return expand(unsqueeze_reduced(g, rank, dims, keepdim), input_sizes);
}

Tensor shape_only(IntArrayRef sizes, DType dtype, Device device) {
  return expand(zeros({}, TensorOptions(dtype).with_device(device)), sizes);
}

}  // namespace loom::grad_utils
