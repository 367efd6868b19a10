// Byte-level BPE (see loom/data/bpe.h): pre-tokens, encoding and GPT-2's two files (training is in
// data/bpe_train.cpp).
#include "loom/data/bpe.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>
#include <mutex>
#include <queue>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "base/json_parse.h"
#include "data/bpe_internal.h"
#include "loom/error.h"
#include "loom/file.h"
#include "loom/json.h"

namespace loom::data {

using bpe_detail::for_each_pre_token;
using bpe_detail::json_quoted;
using bpe_detail::kNumBytes;
using bpe_detail::pair_key;
using bpe_detail::split_specials;

namespace {

namespace fs = std::filesystem;

// Pre-tokens up to this long are cached (longer ones are rare and would bloat the cache), and the
// cache stops growing at kMaxCacheEntries, as Hugging Face's does.
constexpr size_t kMaxCachedPieceBytes = 64;
constexpr size_t kMaxCacheEntries = size_t{1} << 18;
constexpr std::string_view kMergesHeader = "#version: 0.2";

// ---------------------------------------------------------------------------------------------
// Pre-tokens (Note [BPE pre-tokens])

enum class ByteClass : uint8_t { Letter, Number, Space, Other };

constexpr std::array<ByteClass, kNumBytes> make_byte_classes() {
  std::array<ByteClass, kNumBytes> c{};
  for (int b = 0; b < kNumBytes; ++b) {
    if ((b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || b >= 0x80) {
      c[b] = ByteClass::Letter;
    } else if (b >= '0' && b <= '9') {
      c[b] = ByteClass::Number;
    } else if (b == ' ' || b == '\t' || b == '\n' || b == '\v' || b == '\f' || b == '\r') {
      c[b] = ByteClass::Space;
    } else {
      c[b] = ByteClass::Other;
    }
  }
  return c;
}
constexpr std::array<ByteClass, kNumBytes> kByteClass = make_byte_classes();

ByteClass byte_class(char c) {
  return kByteClass[static_cast<unsigned char>(c)];
}

// Length of the contraction ('s 't 're 've 'm 'll 'd, case-sensitive as in GPT-2) at t[i], or 0.
size_t contraction_at(std::string_view t, size_t i) {
  if (t[i] != '\'' || i + 1 >= t.size()) return 0;
  const char c = t[i + 1];
  if (c == 's' || c == 't' || c == 'm' || c == 'd') return 2;
  if (i + 2 >= t.size()) return 0;
  const char d = t[i + 2];
  return (c == 'r' && d == 'e') || (c == 'v' && d == 'e') || (c == 'l' && d == 'l') ? 3 : 0;
}

// ---------------------------------------------------------------------------------------------
// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves; the others, in byte
// order, take the code points 256, 257, ...

constexpr int kMaxStandIn = 0x143;  // 256 + 67 bytes that are not printable

struct ByteTable {
  std::array<uint16_t, kNumBytes> to_code{};
  std::array<int16_t, kMaxStandIn + 1> to_byte{};
  constexpr ByteTable() {
    for (auto& b : to_byte) b = -1;
    int extra = 0;
    for (int b = 0; b < kNumBytes; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_code[b] = static_cast<uint16_t>(printable ? b : kNumBytes + extra++);
      to_byte[to_code[b]] = static_cast<int16_t>(b);
    }
  }
};
constexpr ByteTable kByteTable;

// 1-based line and column of a byte offset.
std::pair<int64_t, int64_t> line_and_column(std::string_view text, size_t offset) {
  offset = std::min(offset, text.size());
  const std::string_view before = text.substr(0, offset);
  const size_t last_newline = before.rfind('\n');
  const auto line = 1 + std::count(before.begin(), before.end(), '\n');
  const size_t column = last_newline == std::string_view::npos ? offset : offset - last_newline - 1;
  return {static_cast<int64_t>(line), static_cast<int64_t>(column) + 1};
}

// 1-based line of the key of member `index` of the top-level object of `text`, valid JSON.
int64_t member_line(std::string_view text, size_t index) {
  int depth = 0;
  size_t member = 0;
  int64_t line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {
      if (depth == 1 && member == index) return line;
      for (++i; i < text.size() && text[i] != '"'; ++i) i += text[i] == '\\';
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',' && depth == 1) {
      ++member;
    }
  }
  return line;
}

}  // namespace

// (data/bpe_internal.h)
size_t bpe_detail::pre_token_end(std::string_view t, size_t i) {
  const size_t n = t.size();
  if (const size_t c = contraction_at(t, i)) return i + c;
  // " ?\p{L}+ | ?\p{N}+ | ?[^\s\p{L}\p{N}]+": an optional space, then a run of one class.
  size_t j = i;
  if (t[j] == ' ' && j + 1 < n && byte_class(t[j + 1]) != ByteClass::Space) ++j;
  const ByteClass k = byte_class(t[j]);
  if (k != ByteClass::Space) {
    size_t e = j + 1;
    while (e < n && byte_class(t[e]) == k) ++e;
    return e;
  }
  // "\s+(?!\S)" takes the run but its last character when a non-space follows (that one joins the
  // next word as its optional space, or stands alone); "\s+" takes a run of one.
  size_t e = i + 1;
  while (e < n && byte_class(t[e]) == ByteClass::Space) ++e;
  return e == n || e - i == 1 ? e : e - 1;
}

// (data/bpe_internal.h)
std::string bpe_detail::json_quoted(std::string_view s) {
  return Json(s).dump();
}

std::vector<std::string_view> bpe_pre_tokenize(std::string_view text) {
  std::vector<std::string_view> out;
  for_each_pre_token(text, [&](std::string_view piece) { out.push_back(piece); });
  return out;
}

std::string bpe_bytes_to_unicode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) {
    const uint16_t cp = kByteTable.to_code[static_cast<unsigned char>(c)];
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

std::optional<std::string> bpe_unicode_to_bytes(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    int cp = -1;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if (c >= 0xC2 && c <= 0xDF && i + 1 < text.size() &&
               (static_cast<unsigned char>(text[i + 1]) & 0xC0) == 0x80) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    }
    if (cp < 0 || cp > kMaxStandIn || kByteTable.to_byte[cp] < 0) return std::nullopt;
    out += static_cast<char>(kByteTable.to_byte[cp]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The tokenizer

void BpeTokenizer::Impl::index() {
  specials.clear();
  special_ids.clear();
  for (int32_t id = 0; id < static_cast<int32_t>(tokens.size()); ++id) {
    if (special[id]) {
      specials.push_back(tokens[id]);
      special_ids.push_back(id);
    } else {
      ids.emplace(tokens[id], id);
    }
  }
  ranks.reserve(merges.size());
  for (int32_t r = 0; r < static_cast<int32_t>(merges.size()); ++r) {
    ranks.emplace(pair_key(merges[r].left, merges[r].right), r);
  }
}

int32_t BpeTokenizer::Impl::rank_of(int32_t left, int32_t right) const {
  const auto it = ranks.find(pair_key(left, right));
  return it == ranks.end() ? -1 : it->second;
}

// GPT-2's bpe() on one pre-token: the lowest-ranked adjacent pair is merged first, equal ranks
// left to right. A heap of (rank, position) over a linked list of symbols keeps a long
// pre-token O(n log n); GPT-2's rescanning loop is O(n^2). As in Hugging Face's tokenizers,
// the two can differ only when a merge creates a pair ranked below itself, which needs a token
// made by two merges (Note [BPE vocabulary]); GPT-2's own files have none.
void BpeTokenizer::Impl::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  const auto n = static_cast<int32_t>(piece.size());
  std::vector<int32_t> sym(n), prev(n), next(n);
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position)
  std::priority_queue<Entry, std::vector<Entry>, std::greater<>> heap;
  for (int32_t i = 0; i < n; ++i) {
    sym[i] = byte_ids[static_cast<unsigned char>(piece[i])];
    prev[i] = i - 1;
    next[i] = i + 1;
    if (i > 0) {
      if (const int32_t r = rank_of(sym[i - 1], sym[i]); r >= 0) heap.emplace(r, i - 1);
    }
  }
  while (!heap.empty()) {
    const auto [r, i] = heap.top();
    heap.pop();
    // Stale when i was absorbed (sym -1) or its pair has changed since.
    if (sym[i] < 0 || next[i] >= n || rank_of(sym[i], sym[next[i]]) != r) continue;
    const int32_t j = next[i];
    sym[i] = merges[r].result;
    sym[j] = -1;
    next[i] = next[j];
    if (next[i] < n) prev[next[i]] = i;
    if (prev[i] >= 0) {
      if (const int32_t q = rank_of(sym[prev[i]], sym[i]); q >= 0) heap.emplace(q, prev[i]);
    }
    if (next[i] < n) {
      if (const int32_t q = rank_of(sym[i], sym[next[i]]); q >= 0) heap.emplace(q, i);
    }
  }
  for (int32_t i = 0; i < n; i = next[i]) out.push_back(sym[i]);
}

void BpeTokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    out.push_back(byte_ids[static_cast<unsigned char>(piece[0])]);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    std::shared_lock lock(cache_mutex);
    const auto it = cache.find(piece);
    if (it != cache.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = out.size();
  bpe(piece, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex);
    if (cache.size() < kMaxCacheEntries) {
      cache.try_emplace(std::string(piece), out.begin() + static_cast<ptrdiff_t>(start), out.end());
    }
  }
}

BpeTokenizer::BpeTokenizer(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  const Impl& impl = *impl_;
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  split_specials(
      text, impl.specials,
      [&](std::string_view segment) {
        for_each_pre_token(segment, [&](std::string_view piece) { impl.encode_piece(piece, out); });
      },
      [&](size_t k) { out.push_back(impl.special_ids[k]); });
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  const std::vector<std::string>& tokens = impl_->tokens;
  size_t bytes = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && static_cast<size_t>(ids[i]) < tokens.size(), "[bpe] decode: id ",
               ids[i], " at position ", i, " is outside the vocabulary [0, ", tokens.size(), ")");
    bytes += tokens[ids[i]].size();
  }
  std::string out;
  out.reserve(bytes);
  for (const int32_t id : ids) out += tokens[id];
  return out;
}

int64_t BpeTokenizer::vocab_size() const {
  return static_cast<int64_t>(impl_->tokens.size());
}

const std::vector<BpeMerge>& BpeTokenizer::merges() const {
  return impl_->merges;
}

const std::vector<std::string>& BpeTokenizer::special_tokens() const {
  return impl_->specials;
}

std::optional<int32_t> BpeTokenizer::token_id(std::string_view bytes) const {
  for (size_t k = 0; k < impl_->specials.size(); ++k) {
    if (impl_->specials[k] == bytes) return impl_->special_ids[k];
  }
  const auto it = impl_->ids.find(bytes);
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeTokenizer::token_bytes(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size(), "[bpe] token_bytes: id ", id,
             " is outside the vocabulary [0, ", vocab_size(), ")");
  return impl_->tokens[id];
}

bool BpeTokenizer::is_special(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < vocab_size(), "[bpe] is_special: id ", id,
             " is outside the vocabulary [0, ", vocab_size(), ")");
  return impl_->special[id] != 0;
}

std::string BpeTokenizer::describe() const {
  const Impl& impl = *impl_;
  std::string specials;
  for (const std::string& s : impl.specials)
    specials += (specials.empty() ? "" : ", ") + json_quoted(s);
  return detail::str_cat("BpeTokenizer: vocab ", impl.tokens.size(), " (", kNumBytes, " bytes + ",
                         impl.tokens.size() - kNumBytes - impl.specials.size(), " merged + ",
                         impl.specials.size(), " special), ", impl.merges.size(),
                         " merges, specials [", specials, "]");
}

// ---------------------------------------------------------------------------------------------
// Files (Note [BPE files])

void BpeTokenizer::save(const std::string& dir) const {
  const Impl& impl = *impl_;
  std::error_code ec;
  fs::create_directories(dir, ec);
  LOOM_CHECK_AS(DataError, !ec, "[bpe] save: cannot create directory ", dir, ": ", ec.message());
  Json::Object vocab;
  vocab.reserve(impl.tokens.size());
  std::vector<std::string> names(impl.tokens.size());
  for (size_t id = 0; id < impl.tokens.size(); ++id) {
    names[id] = impl.special[id] ? impl.tokens[id] : bpe_bytes_to_unicode(impl.tokens[id]);
    vocab.emplace_back(names[id], Json(static_cast<int64_t>(id)));
  }
  std::string merges(kMergesHeader);
  merges += '\n';
  for (const BpeMerge& m : impl.merges) {
    merges += names[m.left];
    merges += ' ';
    merges += names[m.right];
    merges += '\n';
  }
  io::atomic_write_file(dir + "/vocab.json", Json(std::move(vocab)).dump(2) + "\n");
  io::atomic_write_file(dir + "/merges.txt", merges);
}

BpeTokenizer BpeTokenizer::load(const std::string& dir) {
  const std::string vocab_path = dir + "/vocab.json";
  const std::string merges_path = dir + "/merges.txt";
  for (const std::string* path : {&vocab_path, &merges_path}) {
    LOOM_CHECK_AS(DataError, fs::is_regular_file(*path), "[bpe] cannot load a tokenizer: ", *path,
                  " does not exist (BpeTokenizer::save writes vocab.json and merges.txt)");
  }

  // vocab.json: token string -> id, the ids a permutation of 0..N-1.
  const std::string vocab_text = io::read_file(vocab_path);
  Json doc;
  io::detail::JsonParseError err;
  if (!io::detail::parse_json(vocab_text, &doc, &err)) {
    const auto [line, column] = line_and_column(vocab_text, err.offset);
    LOOM_THROW(DataError, "[bpe] ", vocab_path, ":", line, ":", column,
               ": not valid JSON: ", err.reason);
  }
  LOOM_CHECK_AS(DataError, doc.is_object(), "[bpe] ", vocab_path,
                ":1: expected a JSON object of token strings to ids but got a JSON ",
                doc.type_name());
  const Json::Object& members = doc.as_object();
  const size_t n = members.size();
  auto vocab_error = [&](size_t member, const auto&... what) {
    LOOM_THROW(DataError, "[bpe] ", vocab_path, ":", member_line(vocab_text, member), ": ",
               what...);
  };
  LOOM_CHECK_AS(DataError, n <= INT32_MAX, "[bpe] ", vocab_path, " has ", n,
                " entries, more than int32 ids can number");
  std::vector<int64_t> member_of_id(n, -1);
  std::unordered_map<std::string_view, int32_t> id_of_name;
  id_of_name.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    const auto& [name, value] = members[k];
    if (!value.is_int() || value.as_int() < 0 || value.as_int() >= static_cast<int64_t>(n)) {
      vocab_error(k, "token ", json_quoted(name), " has id ", value.dump(),
                  "; ids must be the integers 0..", n - 1, " (one per entry)");
    }
    const int64_t id = value.as_int();
    if (member_of_id[id] >= 0) {
      const size_t first = static_cast<size_t>(member_of_id[id]);
      vocab_error(k, "token ", json_quoted(name), " has id ", id, ", already the id of ",
                  json_quoted(members[first].first), " on line ", member_line(vocab_text, first));
    }
    if (name.empty()) vocab_error(k, "a token is the empty string");
    member_of_id[id] = static_cast<int64_t>(k);
    id_of_name.emplace(name, static_cast<int32_t>(id));
  }

  // merges.txt: "#version: ..." then "left right" per line.
  const std::string merges_text = io::read_file(merges_path);
  auto impl = std::make_shared<Impl>();
  std::vector<uint8_t> produced(n, 0);
  std::unordered_map<uint64_t, int64_t> line_of_pair;
  std::vector<int64_t> merge_lines;
  int64_t line_no = 0;
  for (size_t pos = 0; pos < merges_text.size();) {
    size_t end = merges_text.find('\n', pos);
    if (end == std::string::npos) end = merges_text.size();
    const std::string_view line = std::string_view(merges_text).substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (line_no == 1 && line.starts_with("#version")) continue;
    auto merge_error = [&](const auto&... what) {
      LOOM_THROW(DataError, "[bpe] ", merges_path, ":", line_no, ": ", what...);
    };
    const size_t space = line.find(' ');
    if (space == 0 || space == std::string_view::npos || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos) {
      merge_error("expected two tokens separated by one space but got ", json_quoted(line));
    }
    int32_t part_ids[2];
    const std::string_view parts[2] = {line.substr(0, space), line.substr(space + 1)};
    for (int p = 0; p < 2; ++p) {
      const auto it = id_of_name.find(parts[p]);
      if (it == id_of_name.end()) {
        merge_error("token ", json_quoted(parts[p]), " of merge ", json_quoted(line), " is not in ",
                    vocab_path);
      }
      if (!bpe_unicode_to_bytes(parts[p])) {
        merge_error("token ", json_quoted(parts[p]), " of merge ", json_quoted(line),
                    " is not made of GPT-2's byte stand-in characters");
      }
      part_ids[p] = it->second;
    }
    const std::string merged = std::string(parts[0]) + std::string(parts[1]);
    const auto result = id_of_name.find(merged);
    if (result == id_of_name.end()) {
      merge_error("merge ", json_quoted(line), " makes ", json_quoted(merged), ", which is not in ",
                  vocab_path);
    }
    const auto [seen, fresh] = line_of_pair.emplace(pair_key(part_ids[0], part_ids[1]), line_no);
    if (!fresh) merge_error("merge ", json_quoted(line), " repeats line ", seen->second);
    impl->merges.push_back({part_ids[0], part_ids[1], result->second});
    merge_lines.push_back(line_no);
    produced[result->second] = 1;
  }

  // Byte tokens, merged tokens, and the rest: special tokens.
  impl->tokens.resize(n);
  impl->special.assign(n, 0);
  impl->byte_ids.fill(-1);
  for (size_t id = 0; id < n; ++id) {
    const std::string& name = members[member_of_id[id]].first;
    auto bytes = bpe_unicode_to_bytes(name);
    if (bytes && bytes->size() == 1) {
      impl->byte_ids[static_cast<unsigned char>((*bytes)[0])] = static_cast<int32_t>(id);
    }
    if (bytes && (bytes->size() == 1 || produced[id])) {
      impl->tokens[id] = std::move(*bytes);
    } else {
      impl->tokens[id] = name;
      impl->special[id] = 1;
    }
  }
  for (int b = 0; b < kNumBytes; ++b) {
    LOOM_CHECK_AS(DataError, impl->byte_ids[b] >= 0, "[bpe] ", vocab_path,
                  " has no token for byte ", b, " (",
                  json_quoted(bpe_bytes_to_unicode(std::string(1, static_cast<char>(b)))),
                  "); a byte-level vocabulary needs all 256");
  }
  // A part that neither is a byte nor is made by a merge could never be formed: the file is not
  // a byte-level BPE.
  for (size_t r = 0; r < impl->merges.size(); ++r) {
    for (const int32_t part : {impl->merges[r].left, impl->merges[r].right}) {
      LOOM_CHECK_AS(DataError, !impl->special[part], "[bpe] ", merges_path, ":", merge_lines[r],
                    ": token ", json_quoted(members[member_of_id[part]].first),
                    " is neither a byte nor made by any merge");
    }
  }
  impl->index();
  return BpeTokenizer(std::move(impl));
}

}  // namespace loom::data
