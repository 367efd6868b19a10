// Datasets (data layer): readers for on-disk dataset formats, starting with IDX (the MNIST family).
//
// Every function returns freshly allocated CPU tensors that the caller owns outright (no cache, no
// sharing with other calls). Functions keep no global state and are safe to call from several
// threads at once. Malformed or missing input throws loom::DataError naming the file and, for bad
// contents, the byte offset (counted in the decompressed stream for `.gz` files).
#pragma once

#include <cstddef>
#include <string>

#include "loom/export.h"
#include "loom/tensor.h"

namespace loom::data {

// Reads an IDX file: magic 0x00 0x00 TYPE NDIMS, NDIMS big-endian uint32 sizes, then the elements
// in row-major order, big-endian. TYPE 0x08 -> uint8, 0x09 -> int8, 0x0B -> int16, 0x0C -> int32,
// 0x0D -> float32, 0x0E -> float64. gzip-compressed files (recognised by their content, whatever
// the name) are decompressed transparently. Bytes after the last element are an error.
LOOM_API Tensor read_idx(const std::string& path);

// The same parser over bytes already in memory; `source` names them in error messages.
LOOM_API Tensor parse_idx(const void* bytes, size_t nbytes, const std::string& source);

struct MnistSplit {
  Tensor images;  // uint8 [N, 28, 28]
  Tensor labels;  // int64 [N], values 0..9
};

// Loads the train (60000) or test (10000) split of Fashion-MNIST (or MNIST: same file names) from
// `root`, which holds {train,t10k}-{images-idx3,labels-idx1}-ubyte, each optionally with `.gz`.
LOOM_API MnistSplit load_fashion_mnist(const std::string& root, bool train);

// $LOOM_FASHION_MNIST_DIR when set and non-empty, else where Debian's dataset-fashion-mnist package
// installs the files (/usr/share/datasets/fashion-mnist). The directory may not exist.
LOOM_API std::string default_fashion_mnist_dir();

}  // namespace loom::data
