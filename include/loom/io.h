// Checkpoint I/O (io layer): tensors in the safetensors format, byte-compatible with the files that
// PyTorch and Hugging Face tools read and write, and atomic whole-file writes for sidecars (see
// json.h).
//
// Ownership: save_* only read the tensors they are given; load_* return new CPU tensors that own
// their memory. Writes are atomic: a temporary file in the target's directory is written, fsync'ed
// and renamed over the target, so a crash leaves either the old file or the new one, never a mix.
// Every function is thread-safe; concurrent writes to one path leave one complete file (the last
// rename wins). Errors: bad arguments throw ValueError; unreadable, truncated or corrupt files and
// failed reads or writes throw DataError naming the file (and the tensor and byte offset where that
// applies).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "loom/export.h"
#include "loom/file.h"
#include "loom/tensor.h"

namespace loom::io {

// Named tensors in a fixed order.
using TensorMap = std::vector<std::pair<std::string, Tensor>>;

// Writes `tensors` (CPU, any dtype, any layout: strided views are written as contiguous data) and
// the optional string metadata ("__metadata__") to `path`, atomically. Data is laid out in the
// given order; header entries too. ValueError for duplicate or reserved names ("__metadata__"),
// undefined or non-CPU tensors; DataError when the file cannot be written.
//
// Note [safetensors layout]: 8 bytes little-endian u64 N, then N bytes of UTF-8 JSON mapping each
// name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets relative to the
// first byte after the header), padded with spaces so that N is a multiple of 8; then the raw
// little-endian data of every tensor, back to back, with no gaps and nothing after the last tensor.
LOOM_API void save_safetensors(const std::string& path, const TensorMap& tensors,
                               const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  TensorMap tensors;  // in the order of their data in the file (the save order, for loom's files)
  std::map<std::string, std::string> metadata;
};

// Reads and validates a whole safetensors file: header length and JSON, dtypes (F64, F32, F16,
// BF16, I64, I32, I16, I8, U8, BOOL), shapes against data_offsets, offsets within the file, data
// contiguous without overlaps or gaps, no trailing bytes. Every problem throws DataError starting
// with
// "[safetensors]" and naming the path, the tensor and the byte offset where they apply.
LOOM_API SafetensorsFile load_safetensors(const std::string& path);

}  // namespace loom::io
