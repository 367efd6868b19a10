// The parts of the shard format that writer and reader share: column types, the schema and its
// JSON form, the header checksum, shard file names. See Note [shard layout] (loom/data/shard.h).
#include <cstdio>

#include "data/shard_internal.h"
#include "loom/data/shard.h"
#include "loom/error.h"

namespace loom::data {
namespace {

constexpr const char* kColumnTypeNames[] = {"bytes", "tensor", "int", "string"};
static_assert(std::size(kColumnTypeNames) == size_t(ColumnType::String) + 1);

bool parse_column_type(const std::string& s, ColumnType* out) {
  for (size_t i = 0; i < std::size(kColumnTypeNames); ++i) {
    if (s == kColumnTypeNames[i]) {
      *out = static_cast<ColumnType>(i);
      return true;
    }
  }
  return false;
}

// Only the canonical names that to_json writes ("float32", not "float").
bool parse_dtype_name(const std::string& s, DType* out) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (s == dtype_name(static_cast<DType>(i))) {
      *out = static_cast<DType>(i);
      return true;
    }
  }
  return false;
}

}  // namespace

const char* column_type_name(ColumnType t) {
  const size_t i = static_cast<size_t>(t);
  return i < std::size(kColumnTypeNames) ? kColumnTypeNames[i] : "unknown";
}

size_t Schema::index_of(std::string_view name) const {
  std::string names;
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].name == name) return i;
    names += (i ? ", " : "") + columns[i].name;
  }
  LOOM_THROW(ValueError, "[data.shard] no column named \"", name, "\"; the columns are: ", names);
}

Json Schema::to_json() const {
  Json cols = Json::array();
  for (const Column& c : columns) {
    Json col = Json::object({{"name", c.name}, {"type", column_type_name(c.type)}});
    if (c.type == ColumnType::Tensor) {
      col.set("dtype", dtype_name(c.dtype));
      if (c.any_rank) {
        col.set("shape", nullptr);
      } else {
        Json shape = Json::array();
        for (int64_t s : c.shape) shape.push_back(s);
        col.set("shape", std::move(shape));
      }
    }
    cols.push_back(std::move(col));
  }
  return Json::object({{"columns", std::move(cols)}});
}

Schema Schema::from_json(const Json& j, const std::string& source) {
  auto fail = [&](const auto&... why) {
    std::string text = j.dump();
    if (text.size() > 200) text = text.substr(0, 200) + "...";
    LOOM_THROW(DataError, "[data.shard] ", source, ": invalid schema ", text, ": ", why...);
  };
  const Json* cols = j.is_object() ? j.find("columns") : nullptr;
  if (cols == nullptr || !cols->is_array()) fail("expected {\"columns\": [...]}");
  if (cols->size() == 0 || cols->size() > detail::kMaxColumns)
    fail("it has ", cols->size(), " columns, expected 1 to ", detail::kMaxColumns);
  Schema schema;
  for (const Json& cj : cols->as_array()) {
    Column c;
    const Json* name = cj.is_object() ? cj.find("name") : nullptr;
    const Json* type = cj.is_object() ? cj.find("type") : nullptr;
    if (name == nullptr || !name->is_string() || name->as_string().empty())
      fail("column ", cj.dump(), " has no \"name\" string");
    c.name = name->as_string();
    for (const Column& prev : schema.columns) {
      if (prev.name == c.name) fail("column \"", c.name, "\" appears twice");
    }
    if (type == nullptr || !type->is_string() || !parse_column_type(type->as_string(), &c.type))
      fail("column \"", c.name, "\" has no \"type\" among bytes, tensor, int, string");
    if (c.type == ColumnType::Tensor) {
      const Json* dtype = cj.find("dtype");
      if (dtype == nullptr || !dtype->is_string() ||
          !parse_dtype_name(dtype->as_string(), &c.dtype))
        fail("tensor column \"", c.name, "\" has no valid \"dtype\"");
      const Json* shape = cj.find("shape");
      if (shape == nullptr) fail("tensor column \"", c.name, "\" has no \"shape\"");
      if (shape->is_null()) {
        c.any_rank = true;
      } else {
        if (!shape->is_array() || shape->size() > detail::kMaxTensorRank)
          fail("tensor column \"", c.name, "\": \"shape\" must be null or an array of at most ",
               detail::kMaxTensorRank, " sizes");
        for (const Json& s : shape->as_array()) {
          if (!s.is_int() || s.as_int() < -1)
            fail("tensor column \"", c.name, "\": shape sizes must be integers >= -1");
          c.shape.push_back(s.as_int());
        }
      }
    }
    schema.columns.push_back(std::move(c));
  }
  return schema;
}

bool Schema::operator==(const Schema& o) const {
  if (columns.size() != o.columns.size()) return false;
  for (size_t i = 0; i < columns.size(); ++i) {
    const Column& a = columns[i];
    const Column& b = o.columns[i];
    if (a.name != b.name || a.type != b.type) return false;
    if (a.type == ColumnType::Tensor &&
        (a.dtype != b.dtype || a.shape != b.shape || a.any_rank != b.any_rank))
      return false;
  }
  return true;
}

namespace detail {

std::string shape_text(const Column& c) {
  if (c.any_rank) return "any";
  std::string s = "[";
  for (size_t i = 0; i < c.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(c.shape[i]);
  return s + "]";
}

std::string shard_file_name(int index) {
  char s[32];
  std::snprintf(s, sizeof(s), "shard-%05d.lsh", index);
  return s;
}

uint32_t header_crc(const unsigned char* header, const char* schema, size_t schema_bytes) {
  unsigned char copy[kHeaderBytes];
  std::memcpy(copy, header, kHeaderBytes);
  store_u32(copy + kOffHeaderCrc, 0);
  return crc32c(schema, schema_bytes, crc32c(copy, kHeaderBytes));
}

}  // namespace detail
}  // namespace loom::data
