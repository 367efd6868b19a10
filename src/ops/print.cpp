// PyTorch-style printing: tensor([[1.0000, 2.5000], [3.0000, 4.0000]], dtype=float64). Values of
// another device are read through the dispatcher (Note [Host reads] in host_read.cpp).
#include <cmath>
#include <cstdio>
#include <ostream>
#include <sstream>

#include "loom/error.h"
#include "loom/tensor.h"

namespace loom {
namespace {

constexpr int64_t kSummarizeThreshold = 1000;  // elements; above it, print 3 at each end per dim
constexpr int64_t kEdgeItems = 3;

// Chooses one format for all elements, like torch's _Formatter: integers print as "1." when every
// float is integral; fixed with 4 decimals normally; scientific when the range is too wide.
struct Formatter {
  bool floating = false;
  bool is_bool = false;
  bool int_mode = false;
  bool sci_mode = false;
  int width = 1;

  explicit Formatter(const std::vector<double>& values, DType dt) {
    floating = is_floating(dt);
    is_bool = dt == kBool;
    if (floating) {
      double max_abs = 0, min_abs = INFINITY;
      int_mode = true;
      bool any_finite = false;
      for (double v : values) {
        if (!std::isfinite(v)) continue;
        any_finite = true;
        if (v != std::ceil(v)) int_mode = false;
        double a = std::abs(v);
        if (a != 0) {
          max_abs = std::max(max_abs, a);
          min_abs = std::min(min_abs, a);
        }
      }
      if (!any_finite) int_mode = false;
      if (int_mode) {
        sci_mode = max_abs > 1e8;
      } else if (max_abs > 0) {
        sci_mode = max_abs / min_abs > 1000.0 || max_abs > 1e8 || min_abs < 1e-4;
      }
    }
    for (double v : values) width = std::max(width, static_cast<int>(format(v).size()));
  }

  std::string format(double v) const {
    char buf[64];
    if (is_bool) return v != 0 ? "True" : "False";
    if (!floating) {
      std::snprintf(buf, sizeof(buf), "%lld", static_cast<long long>(v));
      return buf;
    }
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    if (sci_mode) {
      std::snprintf(buf, sizeof(buf), "%.4e", v);
    } else if (int_mode) {
      std::snprintf(buf, sizeof(buf), "%.0f.", v);
    } else {
      std::snprintf(buf, sizeof(buf), "%.4f", v);
    }
    return buf;
  }

  std::string padded(double v) const {
    std::string s = format(v);
    return std::string(static_cast<size_t>(std::max(0, width - static_cast<int>(s.size()))), ' ') +
           s;
  }
};

void print_dim(std::ostringstream& os, const std::vector<double>& vals, IntArrayRef sizes,
               size_t dim, int64_t offset, const Formatter& f, int indent, bool summarize) {
  const int64_t n = sizes[dim];
  int64_t inner = 1;
  for (size_t d = dim + 1; d < sizes.size(); ++d) inner *= sizes[d];
  os << "[";
  bool last = dim + 1 == sizes.size();
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      os << "...";
      if (last) {
        os << ", ";
      } else {
        os << ",\n" << std::string(static_cast<size_t>(indent + 1), ' ');
      }
      i = n - kEdgeItems;
    }
    if (last) {
      os << f.padded(vals[static_cast<size_t>(offset + i)]);
    } else {
      print_dim(os, vals, sizes, dim + 1, offset + i * inner, f, indent + 1, summarize);
    }
    if (i + 1 < n) {
      if (last) {
        os << ", ";
      } else {
        os << "," << std::string(sizes.size() - dim - 1, '\n')
           << std::string(static_cast<size_t>(indent + 1), ' ');
      }
    }
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  const bool default_type = dtype() == default_dtype() || dtype() == kInt64 || dtype() == kBool;
  std::string suffix;
  if (is_meta()) {
    os << "...";
    suffix += ", device='meta', size=" + shape_str();
  } else if (numel() == 0) {
    os << "[]";
    if (dim() != 1) suffix += ", size=" + shape_str();
  } else {
    // The values, read on the host (a copy for another device: Note [Host reads]).
    std::vector<double> vals = to_vector<double>(*this);
    Formatter f(vals, dtype());
    if (dim() == 0) {
      os << f.format(vals[0]);
    } else {
      print_dim(os, vals, sizes(), 0, 0, f, 7, numel() > kSummarizeThreshold);
    }
  }
  if (!is_cpu() && !is_meta()) suffix += ", device='" + device().str() + "'";
  if (!default_type) suffix += std::string(", dtype=") + dtype_name(dtype());
  os << suffix << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  return os << t.str();
}

}  // namespace loom
