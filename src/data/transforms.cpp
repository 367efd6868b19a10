// Field transforms (see loom/data/transforms.h).
#include "loom/data/transforms.h"

#include <cstring>
#include <sstream>

#include "loom/error.h"

namespace loom::data {

namespace {

uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream o;
  o << '[';
  for (size_t i = 0; i < s.size(); ++i) o << (i ? ", " : "") << s[i];
  o << ']';
  return o.str();
}

const Column& find_column(const Schema& schema, const std::string& name, const char* who) {
  for (const Column& c : schema.columns) {
    if (c.name == name) return c;
  }
  std::string have;
  for (const Column& c : schema.columns) have += (have.empty() ? "" : ", ") + c.name;
  LOOM_THROW(ValueError, "[data.", who, "] the dataset has no column '", name, "' (columns: ", have,
             ")");
}

class CopyColumn final : public FieldTransform {
 public:
  CopyColumn(std::string column, std::string as) : column_(std::move(column)), as_(std::move(as)) {}

  FieldSpec spec(const Schema& schema) const override {
    const Column& c = find_column(schema, column_, "copy_column");
    col_ = schema.index_of(column_);
    FieldSpec f;
    f.name = as_.empty() ? column_ : as_;
    if (c.type == ColumnType::Int) {
      f.dtype = DType::Int64;
      is_int_ = true;
    } else if (c.type == ColumnType::Tensor) {
      bool fixed = !c.any_rank;
      for (int64_t d : c.shape) fixed = fixed && d >= 0;
      LOOM_CHECK(
          fixed, "[data.copy_column] column '", column_, "' has shape ", shape_str(c.shape),
          " that varies between samples; batch it through a transform that gives it one shape");
      f.dtype = c.dtype;
      f.shape = c.shape;
    } else {
      LOOM_THROW(ValueError, "[data.copy_column] column '", column_, "' holds ",
                 column_type_name(c.type), ", which cannot be collated into a tensor");
    }
    spec_ = f;
    return f;
  }

  void apply(const SampleView& s, const SampleContext& ctx, void* out) const override {
    if (is_int_) {
      const int64_t v = s.integer(col_);
      std::memcpy(out, &v, sizeof(v));
      return;
    }
    SampleView::TensorRef t = s.tensor(col_);
    if (t.dtype != spec_.dtype || t.sizes != spec_.shape) {
      LOOM_THROW(DataError, "[data.copy_column] sample ", ctx.id, ": column '", column_, "' is ",
                 dtype_name(t.dtype), " ", shape_str(t.sizes), " but the field is ",
                 dtype_name(spec_.dtype), " ", shape_str(spec_.shape));
    }
    std::memcpy(out, t.data, spec_.row_bytes());
  }

  std::string describe() const override {
    return (as_.empty() ? column_ : as_) + "[copy of " + column_ + "]";
  }

 private:
  std::string column_, as_;
  // Filled by spec(), which the loader calls once before any apply().
  mutable size_t col_ = 0;
  mutable bool is_int_ = false;
  mutable FieldSpec spec_;
};

class ImageColumn final : public FieldTransform {
 public:
  ImageColumn(std::string column, ImageOptions o, std::string as)
      : column_(std::move(column)), as_(std::move(as)), o_(std::move(o)) {
    LOOM_CHECK(o_.padding >= 0 && o_.crop_h >= 0 && o_.crop_w >= 0,
               "[data.image_column] crop and padding must be >= 0");
    LOOM_CHECK(o_.flip_p >= 0 && o_.flip_p <= 1,
               "[data.image_column] flip_p must be in [0, 1] but is ", o_.flip_p);
    LOOM_CHECK(!o_.mean.empty() && !o_.std.empty(),
               "[data.image_column] mean and std need at least one value");
    for (double sd : o_.std) LOOM_CHECK(sd != 0, "[data.image_column] std must not be 0");
  }

  FieldSpec spec(const Schema& schema) const override {
    const Column& c = find_column(schema, column_, "image_column");
    col_ = schema.index_of(column_);
    LOOM_CHECK(c.type == ColumnType::Tensor && c.dtype == DType::UInt8 && !c.any_rank &&
                   (c.shape.size() == 2 || c.shape.size() == 3),
               "[data.image_column] column '", column_,
               "' must be a uint8 tensor [H, W] or [H, W, C]");
    rank_ = c.shape.size();
    h_ = c.shape[0];
    w_ = c.shape[1];
    ch_ = c.shape.size() == 3 ? c.shape[2] : 1;
    LOOM_CHECK(h_ > 0 && w_ > 0 && ch_ > 0, "[data.image_column] column '", column_,
               "' needs fixed image sizes, not ", shape_str(c.shape));
    oh_ = o_.crop_h ? o_.crop_h : h_;
    ow_ = o_.crop_w ? o_.crop_w : w_;
    LOOM_CHECK(oh_ <= h_ + 2 * o_.padding && ow_ <= w_ + 2 * o_.padding,
               "[data.image_column] crop ", oh_, "x", ow_, " is larger than the padded image ",
               h_ + 2 * o_.padding, "x", w_ + 2 * o_.padding);
    LOOM_CHECK(o_.mean.size() == 1 || static_cast<int64_t>(o_.mean.size()) == ch_,
               "[data.image_column] mean has ", o_.mean.size(), " values for ", ch_, " channels");
    LOOM_CHECK(o_.std.size() == 1 || static_cast<int64_t>(o_.std.size()) == ch_,
               "[data.image_column] std has ", o_.std.size(), " values for ", ch_, " channels");
    a_.assign(static_cast<size_t>(ch_), 0.f);
    b_.assign(static_cast<size_t>(ch_), 0.f);
    for (int64_t c2 = 0; c2 < ch_; ++c2) {
      const double m = o_.mean.size() == 1 ? o_.mean[0] : o_.mean[static_cast<size_t>(c2)];
      const double sd = o_.std.size() == 1 ? o_.std[0] : o_.std[static_cast<size_t>(c2)];
      a_[static_cast<size_t>(c2)] = static_cast<float>(o_.scale / sd);
      b_[static_cast<size_t>(c2)] = static_cast<float>(-m / sd);
    }
    FieldSpec f;
    f.name = as_.empty() ? column_ : as_;
    f.dtype = DType::Float32;
    f.shape = {ch_, oh_, ow_};
    return f;
  }

  void apply(const SampleView& s, const SampleContext& ctx, void* out) const override {
    SampleView::TensorRef t = s.tensor(col_);
    const bool ok = t.dtype == DType::UInt8 && t.sizes.size() == rank_ && t.sizes[0] == h_ &&
                    t.sizes[1] == w_ && (rank_ == 2 || t.sizes[2] == ch_);
    if (!ok) {
      LOOM_THROW(DataError, "[data.image_column] sample ", ctx.id, ": column '", column_, "' is ",
                 dtype_name(t.dtype), " ", shape_str(t.sizes), " but the transform expects uint8 [",
                 h_, ", ", w_, ch_ > 1 ? ", " + std::to_string(ch_) : std::string(), "]");
    }
    const auto* in = static_cast<const uint8_t*>(t.data);
    auto* o = static_cast<float*>(out);
    // Crop offset in padded coordinates and flip, from the sample's own seed.
    uint64_t r = ctx.rng_seed;
    int64_t top = (h_ + 2 * o_.padding - oh_) / 2, left = (w_ + 2 * o_.padding - ow_) / 2;
    if (o_.random_crop) {
      top = static_cast<int64_t>(mix64(r += 0x9E3779B97F4A7C15ull) %
                                 static_cast<uint64_t>(h_ + 2 * o_.padding - oh_ + 1));
      left = static_cast<int64_t>(mix64(r += 0x9E3779B97F4A7C15ull) %
                                  static_cast<uint64_t>(w_ + 2 * o_.padding - ow_ + 1));
    }
    bool flip = false;
    if (o_.flip_p > 0) {
      const double u = static_cast<double>(mix64(r += 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
      flip = u < o_.flip_p;
    }
    top -= o_.padding;
    left -= o_.padding;
    for (int64_t c = 0; c < ch_; ++c) {
      const float a = a_[static_cast<size_t>(c)], b = b_[static_cast<size_t>(c)];
      float* oc = o + c * oh_ * ow_;
      for (int64_t y = 0; y < oh_; ++y) {
        const int64_t sy = top + y;
        float* row = oc + y * ow_;
        if (sy < 0 || sy >= h_) {
          for (int64_t x = 0; x < ow_; ++x) row[x] = b;
          continue;
        }
        const uint8_t* src = in + sy * w_ * ch_ + c;
        if (!flip && left >= 0 && left + ow_ <= w_) {
          const uint8_t* sp = src + left * ch_;
          for (int64_t x = 0; x < ow_; ++x) row[x] = static_cast<float>(sp[x * ch_]) * a + b;
          continue;
        }
        for (int64_t x = 0; x < ow_; ++x) {
          const int64_t sx = left + (flip ? ow_ - 1 - x : x);
          row[x] = (sx < 0 || sx >= w_) ? b : static_cast<float>(src[sx * ch_]) * a + b;
        }
      }
    }
  }

  std::string describe() const override {
    std::ostringstream s;
    s << (as_.empty() ? column_ : as_) << "[float32 from " << column_;
    if (o_.crop_h || o_.crop_w)
      s << (o_.random_crop ? ", random crop " : ", centre crop ") << o_.crop_h << "x" << o_.crop_w;
    if (o_.padding) s << " pad " << o_.padding;
    if (o_.flip_p > 0) s << ", flip p=" << o_.flip_p;
    s << ", x*" << o_.scale << " normalised mean";
    for (double m : o_.mean) s << ' ' << m;
    s << " std";
    for (double d : o_.std) s << ' ' << d;
    s << ']';
    return s.str();
  }

 private:
  std::string column_, as_;
  ImageOptions o_;
  mutable size_t col_ = 0, rank_ = 2;
  mutable int64_t h_ = 0, w_ = 0, ch_ = 1, oh_ = 0, ow_ = 0;
  mutable std::vector<float> a_, b_;
};

}  // namespace

size_t FieldSpec::row_bytes() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return static_cast<size_t>(n) * element_size(dtype);
}

std::shared_ptr<FieldTransform> copy_column(const std::string& column, const std::string& as) {
  return std::make_shared<CopyColumn>(column, as);
}

std::shared_ptr<FieldTransform> image_column(const std::string& column, ImageOptions options,
                                             const std::string& as) {
  return std::make_shared<ImageColumn>(column, std::move(options), as);
}

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t position) {
  uint64_t h = mix64(seed + 0x9E3779B97F4A7C15ull);
  h = mix64(h ^ (static_cast<uint64_t>(epoch) + 0x632BE59BD9B4E019ull));
  return mix64(h ^ (static_cast<uint64_t>(position) * 0xD6E8FEB86659FD93ull));
}

}  // namespace loom::data
