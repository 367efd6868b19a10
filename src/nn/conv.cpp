// Conv2d and MaxPool2d.
#include "nn/check.h"

namespace loom::nn {

namespace detail {
void init_like_pytorch_linear(const Tensor& weight, const Tensor* bias, Generator* gen);
}  // namespace detail

namespace {

std::string pair_str(const Size2& s) {
  return loom::detail::str_cat("[", s.h, ", ", s.w, "]");
}

// The smallest padded input a window of `kernel` with `dilation` fits in.
int64_t effective_kernel(int64_t kernel, int64_t dilation) {
  return dilation * (kernel - 1) + 1;
}

void check_window_fits(const Module& m, const Tensor& input, Size2 kernel, Size2 padding,
                       Size2 dilation) {
  const int64_t h = input.size(-2), w = input.size(-1);
  const int64_t kh = effective_kernel(kernel.h, dilation.h),
                kw = effective_kernel(kernel.w, dilation.w);
  LOOM_CHECK(h + 2 * padding.h >= kh && w + 2 * padding.w >= kw, "[", m.name(),
             "] input of spatial size ", h, "x", w, " (", h + 2 * padding.h, "x", w + 2 * padding.w,
             " with padding) is smaller than the effective kernel size ", kh, "x", kw,
             " (input shape ", input.shape_str(), ")");
}

}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride,
               Size2 padding, Size2 dilation, int64_t groups, bool bias, Generator* gen)
    : in_(in_channels),
      out_(out_channels),
      groups_(groups),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      dilation_(dilation) {
  LOOM_CHECK(groups > 0, "[Conv2d] groups must be positive but got ", groups);
  LOOM_CHECK(in_channels > 0 && out_channels > 0,
             "[Conv2d] in_channels and out_channels must be "
             "positive but got ",
             in_channels, " and ", out_channels);
  LOOM_CHECK(in_channels % groups == 0, "[Conv2d] in_channels (", in_channels,
             ") must be divisible by groups (", groups, ")");
  LOOM_CHECK(out_channels % groups == 0, "[Conv2d] out_channels (", out_channels,
             ") must be divisible by groups (", groups, ")");
  LOOM_CHECK(kernel_.h > 0 && kernel_.w > 0, "[Conv2d] kernel_size must be positive but got ",
             pair_str(kernel_));
  LOOM_CHECK(stride_.h > 0 && stride_.w > 0, "[Conv2d] stride must be positive but got ",
             pair_str(stride_));
  LOOM_CHECK(padding_.h >= 0 && padding_.w >= 0, "[Conv2d] padding must be non-negative but got ",
             pair_str(padding_));
  LOOM_CHECK(dilation_.h > 0 && dilation_.w > 0, "[Conv2d] dilation must be positive but got ",
             pair_str(dilation_));
  weight_ =
      add_parameter("weight", empty({out_, in_ / groups_, kernel_.h, kernel_.w}, default_dtype()));
  if (bias) bias_ = add_parameter("bias", empty({out_}, default_dtype()));
  detail::init_like_pytorch_linear(weight(), bias_ ? &parameter_at(*bias_) : nullptr, gen);
}

Conv2d::Conv2d(const Conv2dOptions& o, Generator* gen)
    : Conv2d(o.in_channels, o.out_channels, o.kernel_size, o.stride, o.padding, o.dilation,
             o.groups, o.bias, gen) {}

const Tensor& Conv2d::bias() const {
  static const Tensor kNone;
  return bias_ ? parameter_at(*bias_) : kNone;
}

std::string Conv2d::name() const {
  std::string s =
      loom::detail::str_cat("Conv2d(", in_, ", ", out_, ", kernel_size=", pair_str(kernel_),
                            ", stride=", pair_str(stride_));
  if (padding_.h != 0 || padding_.w != 0) s += ", padding=" + pair_str(padding_);
  if (dilation_.h != 1 || dilation_.w != 1) s += ", dilation=" + pair_str(dilation_);
  if (groups_ != 1) s += loom::detail::str_cat(", groups=", groups_);
  if (!bias_) s += ", bias=false";
  return s + ")";
}

Tensor Conv2d::forward(const Tensor& input) {
  detail::check_image_input(*this, input);
  LOOM_CHECK(input.size(-3) == in_, "[", name(), "] input has ", input.size(-3),
             " channels, expected ", in_, " (input shape ", input.shape_str(),
             ", channels are dim ", input.dim() - 3, ")");
  check_window_fits(*this, input, kernel_, padding_, dilation_);
  detail::check_input_dtype(*this, input, weight());
  return conv2d(input, weight(), bias_ ? std::optional<Tensor>(parameter_at(*bias_)) : std::nullopt,
                {stride_.h, stride_.w}, {padding_.h, padding_.w}, {dilation_.h, dilation_.w},
                groups_);
}

MaxPool2d::MaxPool2d(Size2 kernel_size, std::optional<Size2> stride, Size2 padding, Size2 dilation,
                     bool ceil_mode)
    : kernel_(kernel_size),
      stride_(stride.value_or(kernel_size)),
      padding_(padding),
      dilation_(dilation),
      ceil_mode_(ceil_mode) {
  LOOM_CHECK(kernel_.h > 0 && kernel_.w > 0, "[MaxPool2d] kernel_size must be positive but got ",
             pair_str(kernel_));
  LOOM_CHECK(stride_.h > 0 && stride_.w > 0, "[MaxPool2d] stride must be positive but got ",
             pair_str(stride_));
  LOOM_CHECK(dilation_.h > 0 && dilation_.w > 0, "[MaxPool2d] dilation must be positive but got ",
             pair_str(dilation_));
  LOOM_CHECK(padding_.h >= 0 && padding_.w >= 0 && padding_.h <= kernel_.h / 2 &&
                 padding_.w <= kernel_.w / 2,
             "[MaxPool2d] padding must be non-negative and at most half the kernel size, but got "
             "padding ",
             pair_str(padding_), " for kernel_size ", pair_str(kernel_));
}

std::string MaxPool2d::name() const {
  std::string s = loom::detail::str_cat("MaxPool2d(kernel_size=", pair_str(kernel_),
                                        ", stride=", pair_str(stride_));
  if (padding_.h != 0 || padding_.w != 0) s += ", padding=" + pair_str(padding_);
  if (dilation_.h != 1 || dilation_.w != 1) s += ", dilation=" + pair_str(dilation_);
  if (ceil_mode_) s += ", ceil_mode=true";
  return s + ")";
}

Tensor MaxPool2d::forward(const Tensor& input) {
  detail::check_image_input(*this, input);
  check_window_fits(*this, input, kernel_, padding_, dilation_);
  return max_pool2d(input, {kernel_.h, kernel_.w}, {stride_.h, stride_.w}, {padding_.h, padding_.w},
                    {dilation_.h, dilation_.w}, ceil_mode_);
}

}  // namespace loom::nn
