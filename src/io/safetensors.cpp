// safetensors reading and writing. The layout is described in Note [safetensors layout] (io.h).
#include <algorithm>
#include <bit>
#include <optional>
#include <unordered_set>

#include "base/file_util.h"
#include "base/json_parse.h"
#include "loom/error.h"
#include "loom/io.h"
#include "loom/json.h"
#include "loom/ops.h"

namespace loom::io {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; a big-endian host needs byte swapping here");

// The format's dtype names, indexed by DType.
constexpr const char* kDTypeNames[] = {"BOOL", "U8",  "I8",   "I16", "I32",
                                       "I64",  "F16", "BF16", "F32", "F64"};
static_assert(std::size(kDTypeNames) == kNumDTypes);
static_assert(static_cast<int>(DType::Bool) == 0 && static_cast<int>(DType::Int64) == 5 &&
              static_cast<int>(DType::BFloat16) == 7 && static_cast<int>(DType::Float64) == 9);

// Same limit as the reference implementation: a larger header is corruption, not a real checkpoint.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

const char* format_dtype_name(DType t) {
  return kDTypeNames[static_cast<int>(t)];
}

std::optional<DType> parse_format_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (name == kDTypeNames[i]) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string_view> names;
  for (const auto& [name, t] : tensors) {
    LOOM_CHECK(name != kMetadataKey, "[safetensors] cannot write ", path, ": \"", kMetadataKey,
               "\" is reserved for metadata and cannot name a tensor");
    LOOM_CHECK(names.insert(name).second, "[safetensors] cannot write ", path,
               ": duplicate tensor name \"", name, "\"");
    LOOM_CHECK(t.defined(), "[safetensors] cannot write ", path, ": tensor \"", name,
               "\" is undefined");
    LOOM_CHECK(t.is_cpu(), "[safetensors] cannot write ", path, ": tensor \"", name, "\" is on ",
               t.device(), "; copy it to the CPU first");
  }

  Json header = Json::object();
  Json::Object& entries = header.as_object();
  entries.reserve(tensors.size() + 1);
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta.as_object().emplace_back(key, Json(value));
    entries.emplace_back(kMetadataKey, std::move(meta));
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    Json shape = Json::array();
    for (int64_t s : t.sizes()) shape.push_back(s);
    uint64_t end = offset + t.nbytes();
    entries.emplace_back(name, Json::object({{"dtype", format_dtype_name(t.dtype())},
                                             {"shape", std::move(shape)},
                                             {"data_offsets", Json::array({offset, end})}}));
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  LOOM_CHECK(text.size() <= kMaxHeaderBytes, "[safetensors] cannot write ", path,
             ": the header is ", text.size(), " bytes, more than readers accept (", kMaxHeaderBytes,
             ")");

  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
  detail::AtomicFile file(path);
  file.write(length, sizeof(length));
  file.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    Tensor data = t.is_contiguous() ? t : t.contiguous();
    if (data.numel() > 0) file.write(data.data_ptr(), data.nbytes());
  }
  file.commit();
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin;
  uint64_t end;
};

// Checks one header entry against the format and the data section's size.
class HeaderChecker {
 public:
  HeaderChecker(const std::string& path, uint64_t data_start, uint64_t data_size)
      : path_(path), data_start_(data_start), data_size_(data_size) {}

  Entry entry(const std::string& name, const Json& v) const {
    auto where = [&] { return str_cat_tensor(name); };
    LOOM_CHECK_AS(DataError, v.is_object(), where(), " is a JSON ", v.type_name(),
                  ", expected an object with dtype, shape and data_offsets");
    Entry e{name, DType::Float32, {}, 0, 0};

    const Json& dtype = member(v, name, "dtype");
    LOOM_CHECK_AS(DataError, dtype.is_string(), where(), ": \"dtype\" is a JSON ",
                  dtype.type_name(), ", expected a string");
    std::optional<DType> parsed = parse_format_dtype(dtype.as_string());
    LOOM_CHECK_AS(DataError, parsed.has_value(), where(), " has unknown dtype \"",
                  dtype.as_string(),
                  "\" (loom reads F64, F32, F16, BF16, I64, I32, I16, I8, U8 and BOOL)");
    e.dtype = *parsed;

    const Json& shape = member(v, name, "shape");
    LOOM_CHECK_AS(DataError, shape.is_array(), where(), ": \"shape\" is a JSON ", shape.type_name(),
                  ", expected an array of sizes");
    uint64_t numel = 1;
    bool overflow = false;
    for (const Json& s : shape.as_array()) {
      LOOM_CHECK_AS(DataError, s.is_int() && s.as_int() >= 0, where(), ": \"shape\" ", shape.dump(),
                    " holds ", s.dump(), ", expected non-negative integers");
      e.shape.push_back(s.as_int());
      overflow |= __builtin_mul_overflow(numel, static_cast<uint64_t>(s.as_int()), &numel);
    }
    uint64_t nbytes = 0;
    overflow |= __builtin_mul_overflow(numel, element_size(e.dtype), &nbytes);
    LOOM_CHECK_AS(DataError, !overflow && numel <= uint64_t(INT64_MAX), where(), ": shape ",
                  shape_text(e.shape), " is too large");

    const Json& offsets = member(v, name, "data_offsets");
    bool offsets_ok = offsets.is_array() && offsets.size() == 2;
    for (size_t i = 0; offsets_ok && i < 2; ++i) {
      offsets_ok = offsets.at(i).is_int() && offsets.at(i).as_int() >= 0;
    }
    LOOM_CHECK_AS(DataError, offsets_ok, where(), ": \"data_offsets\" is ", offsets.dump(),
                  ", expected [begin, end] with non-negative integers");
    e.begin = static_cast<uint64_t>(offsets.at(size_t{0}).as_int());
    e.end = static_cast<uint64_t>(offsets.at(size_t{1}).as_int());
    LOOM_CHECK_AS(DataError, e.begin <= e.end, where(), ": data_offsets [", e.begin, ", ", e.end,
                  "] end before they begin");
    LOOM_CHECK_AS(DataError, e.end - e.begin == nbytes, where(), ": data_offsets [", e.begin, ", ",
                  e.end, "] hold ", e.end - e.begin, " bytes but dtype ",
                  format_dtype_name(e.dtype), " and shape ", shape_text(e.shape), " need ", nbytes,
                  " bytes");
    LOOM_CHECK_AS(DataError, e.end <= data_size_, where(), ": data_offsets [", e.begin, ", ", e.end,
                  "] (file bytes ", data_start_ + e.begin, " to ", data_start_ + e.end,
                  ") run past the end of the file, which has ", data_size_,
                  " data bytes; the file is truncated or corrupt");
    return e;
  }

  std::map<std::string, std::string> metadata(const Json& v) const {
    LOOM_CHECK_AS(DataError, v.is_object(), "[safetensors] ", path_, ": \"", kMetadataKey,
                  "\" is a JSON ", v.type_name(), ", expected an object of strings");
    std::map<std::string, std::string> out;
    for (const auto& [key, value] : v.as_object()) {
      LOOM_CHECK_AS(DataError, value.is_string(), "[safetensors] ", path_, ": \"", kMetadataKey,
                    "\" entry \"", key, "\" is a JSON ", value.type_name(), ", expected a string");
      out.emplace(key, value.as_string());
    }
    return out;
  }

  // Sorts the entries by position and checks that they tile the data section exactly.
  void check_layout(std::vector<Entry>& entries) const {
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t expected = 0;
    const Entry* previous = nullptr;
    for (const Entry& e : entries) {
      LOOM_CHECK_AS(DataError, e.begin >= expected, str_cat_tensor(e.name), ": data_offsets [",
                    e.begin, ", ", e.end, "] overlap tensor \"", previous ? previous->name : "",
                    "\" (data_offsets [", previous ? previous->begin : 0, ", ", expected, "])");
      LOOM_CHECK_AS(DataError, e.begin == expected, str_cat_tensor(e.name), ": data_offsets [",
                    e.begin, ", ", e.end, "] leave a gap of ", e.begin - expected,
                    " bytes after data offset ", expected, " (file byte ", data_start_ + expected,
                    "); tensors must be stored back to back");
      expected = e.end;
      previous = &e;
    }
    LOOM_CHECK_AS(DataError, expected == data_size_, "[safetensors] ", path_,
                  ": the tensors end at ", "file byte ", data_start_ + expected,
                  " but the file has ", data_size_ - expected,
                  " more bytes; the file is corrupt or not a safetensors file");
  }

 private:
  std::string str_cat_tensor(const std::string& name) const {
    return "[safetensors] " + path_ + ": tensor \"" + name + "\"";
  }
  const Json& member(const Json& v, const std::string& name, const char* key) const {
    const Json* m = v.find(key);
    LOOM_CHECK_AS(DataError, m != nullptr, str_cat_tensor(name), " has no \"", key,
                  "\" in its entry ", v.dump());
    return *m;
  }

  const std::string& path_;
  uint64_t data_start_;
  uint64_t data_size_;
};

}  // namespace

SafetensorsFile load_safetensors(const std::string& path) {
  detail::InputFile file(path, "safetensors");
  const uint64_t file_size = file.size();
  LOOM_CHECK_AS(DataError, file_size >= 8, "[safetensors] ", path, ": the file has ", file_size,
                " bytes, fewer than the 8-byte header length; it is truncated or not a safetensors "
                "file");
  unsigned char length[8];
  LOOM_CHECK_AS(DataError, file.read_at(0, length, 8) == 8, "[safetensors] ", path,
                ": the file shrank while being read");
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = (header_size << 8) | length[i];
  LOOM_CHECK_AS(DataError, header_size <= kMaxHeaderBytes, "[safetensors] ", path,
                ": the header length at byte offset 0 is ", header_size,
                ", more than the limit of ", kMaxHeaderBytes,
                "; the file is corrupt or not a safetensors file");
  LOOM_CHECK_AS(DataError, header_size <= file_size - 8, "[safetensors] ", path,
                ": the header length at byte offset 0 is ", header_size, " but only ",
                file_size - 8, " bytes follow it; the file is truncated or corrupt");

  std::string text(header_size, '\0');
  LOOM_CHECK_AS(DataError, file.read_at(8, text.data(), text.size()) == text.size(),
                "[safetensors] ", path, ": the file shrank while being read");
  Json header;
  detail::JsonParseError err;
  LOOM_CHECK_AS(DataError, detail::parse_json(text, &header, &err), "[safetensors] ", path,
                ": the header is not valid JSON: ", err.reason, " at byte offset ", 8 + err.offset,
                " (header byte ", err.offset, ")");
  LOOM_CHECK_AS(DataError, header.is_object(), "[safetensors] ", path, ": the header is a JSON ",
                header.type_name(), ", expected an object");

  const uint64_t data_start = 8 + header_size;
  HeaderChecker checker(path, data_start, file_size - data_start);
  SafetensorsFile out;
  std::vector<Entry> entries;
  entries.reserve(header.size());
  for (const auto& [name, value] : header.as_object()) {
    if (name == kMetadataKey) {
      out.metadata = checker.metadata(value);
    } else {
      entries.push_back(checker.entry(name, value));
    }
  }
  checker.check_layout(entries);

  out.tensors.reserve(entries.size());
  for (Entry& e : entries) {
    Tensor t = empty_tensor(e.shape, e.dtype);
    size_t nbytes = e.end - e.begin;
    LOOM_CHECK_AS(DataError, file.read_at(data_start + e.begin, t.data_ptr(), nbytes) == nbytes,
                  "[safetensors] ", path, ": tensor \"", e.name,
                  "\": the file shrank while its data", " at byte offset ", data_start + e.begin,
                  " was being read");
    if (e.dtype == kBool) {
      // Any byte other than 0 or 1 would be an invalid C++ bool; read it as true, as NumPy does.
      auto* bytes = static_cast<unsigned char*>(t.data_ptr());
      for (size_t i = 0; i < nbytes; ++i) bytes[i] = bytes[i] != 0;
    }
    out.tensors.emplace_back(std::move(e.name), std::move(t));
  }
  return out;
}

}  // namespace loom::io
