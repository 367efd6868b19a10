// Byte-level BPE's internals shared by the tokenizer (data/bpe.cpp) and its training
// (data/bpe_train.cpp): the pre-tokenizer, the tokenizer's state (BpeTokenizer::Impl) and small
// helpers (data layer; internal).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/data/bpe.h"

namespace loom::data {
namespace bpe_detail {

constexpr int kNumBytes = 256;  // byte tokens, in every vocabulary

// End of the pre-token starting at t[i] (i < t.size()): the regex's alternatives in their order
// (Note [BPE pre-tokens]).
size_t pre_token_end(std::string_view t, size_t i);

template <class F>
void for_each_pre_token(std::string_view text, F&& f) {
  for (size_t i = 0; i < text.size();) {
    const size_t end = pre_token_end(text, i);
    f(text.substr(i, end - i));
    i = end;
  }
}

// Cuts special tokens out of text: on_text(segment) for the text between them (never empty),
// on_special(k) for special k. At one position the longest special wins.
template <class OnText, class OnSpecial>
void split_specials(std::string_view text, const std::vector<std::string>& specials,
                    OnText&& on_text, OnSpecial&& on_special) {
  // next[k]: where special k next occurs at or after pos (npos: nowhere).
  std::vector<size_t> next(specials.size());
  for (size_t k = 0; k < specials.size(); ++k) next[k] = text.find(specials[k]);
  size_t pos = 0;
  while (pos < text.size()) {
    size_t at = std::string_view::npos;
    size_t which = 0;
    for (size_t k = 0; k < specials.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < pos) next[k] = text.find(specials[k], pos);
      if (next[k] < at || (next[k] == at && at != std::string_view::npos &&
                           specials[k].size() > specials[which].size())) {
        at = next[k];
        which = k;
      }
    }
    if (at == std::string_view::npos) {
      on_text(text.substr(pos));
      return;
    }
    if (at > pos) on_text(text.substr(pos, at - pos));
    on_special(which);
    pos = at + specials[which].size();
  }
}

// `s` as a JSON string (quoted, escaped).
std::string json_quoted(std::string_view s);

// (left, right) as one key.
inline uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace bpe_detail

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;    // id -> bytes (a special token: its text)
  std::vector<uint8_t> special;       // id -> 1 for a special token
  std::vector<std::string> specials;  // their texts, in id order
  std::vector<int32_t> special_ids;
  std::vector<BpeMerge> merges;
  std::array<int32_t, bpe_detail::kNumBytes> byte_ids{};
  std::unordered_map<uint64_t, int32_t> ranks;  // (left, right) -> rank
  // Token bytes -> id, not specials.
  std::unordered_map<std::string, int32_t, bpe_detail::StringHash, std::equal_to<>> ids;

  mutable std::shared_mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int32_t>, bpe_detail::StringHash,
                             std::equal_to<>>
      cache;  // GUARDED_BY(cache_mutex): pre-token -> ids

  // Fills the lookup tables from tokens, special, merges and byte_ids.
  void index();
  // The rank of the merge of (left, right), or -1 when no merge joins them.
  int32_t rank_of(int32_t left, int32_t right) const;
  // GPT-2's bpe() on one pre-token (data/bpe.cpp): appends its ids to `out`.
  void bpe(std::string_view piece, std::vector<int32_t>& out) const;
  // The ids of one pre-token, appended to `out`, through the cache.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

}  // namespace loom::data
