// Transforms (data layer): how a decoded sample becomes one row of a batch.
//
// A batch has fields (tensors whose first dimension is the batch); each field is produced by one
// FieldTransform from the sample's columns and written straight into that field's row of the batch
// buffer, so decode, augmentation and collation are one pass with no intermediate tensors.
// Randomness comes from SampleContext::rng_seed, derived from (seed, epoch, global position): the
// same sample at the same place of the same epoch is augmented the same way on any number of ranks
// and workers, and after a resume.
//
// Thread-safety: spec() binds a transform to a dataset's schema (a transform object serves datasets
// of one schema); after that it is immutable and apply() is called from many workers at once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/data/shard.h"
#include "loom/dtype.h"
#include "loom/export.h"

namespace loom::data {

struct LOOM_API FieldSpec {
  std::string name;
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // per sample (the batch adds a leading dimension)
  size_t row_bytes() const;
};

struct SampleContext {
  int64_t id = 0;        // global sample id
  int64_t position = 0;  // global position in the epoch
  int64_t epoch = 0;
  uint64_t rng_seed = 0;  // per-sample seed for augmentation
};

class LOOM_API FieldTransform {
 public:
  virtual ~FieldTransform() = default;
  // The field this produces for a dataset with `schema` (ValueError when the schema lacks what it
  // needs, naming the column).
  virtual FieldSpec spec(const Schema& schema) const = 0;
  // Writes one row (spec().row_bytes() bytes) at `out`. DataError when the sample does not fit the
  // spec (e.g. a tensor of another shape), naming the column and the shape.
  virtual void apply(const SampleView& sample, const SampleContext& ctx, void* out) const = 0;
  // A short description with every parameter ("image[float32 1x28x28 crop 28 pad 2 flip 0.5 ...]").
  virtual std::string describe() const = 0;
};

// Copies a column as is: a fixed-shape Tensor column into a field of that dtype and shape; an Int
// column into an int64 scalar field. `as` names the field (default: the column's name).
LOOM_API std::shared_ptr<FieldTransform> copy_column(const std::string& column,
                                                     const std::string& as = "");

struct ImageOptions {
  // Input: a uint8 Tensor column shaped [H, W] (one channel) or [H, W, C] (channels last, as
  // decoded images are stored). Output: float32 [C, H', W'] where H' x W' = crop (0: no crop, H x
  // W).
  int64_t crop_h = 0, crop_w = 0;
  int64_t padding =
      0;  // zero padding on every side before a random crop (torchvision's RandomCrop)
  bool random_crop = false;  // false: centre crop
  double flip_p = 0.0;       // probability of a horizontal flip
  double scale = 1.0 / 255.0;
  std::vector<double> mean = {0.0};  // per channel (one value: all channels), after scaling
  std::vector<double> std = {1.0};
};
// Normalise, crop and flip an image column in one pass: out = (in * scale - mean) / std, with
// pixels from the padding being (0 * scale - mean) / std.
LOOM_API std::shared_ptr<FieldTransform> image_column(const std::string& column,
                                                      ImageOptions options,
                                                      const std::string& as = "");

// The per-sample seed: a hash of (seed, epoch, position).
LOOM_API uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t position);

}  // namespace loom::data
