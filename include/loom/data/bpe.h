// Byte-level BPE tokenizer (data layer): GPT-2's tokenizer, trained, saved and loaded by loom.
//
// A BpeTokenizer turns bytes into token ids and back; decode(encode(x)) == x for any bytes. It is
// an immutable value: copies share their tables and their pre-token cache. Every const method may
// be called from many threads at once (the cache is behind a reader-writer lock). Bad arguments
// throw ValueError; unreadable or malformed files throw DataError naming the file and line.
//
// Note [BPE vocabulary]
//   A trained tokenizer's ids are: 0..255 the single bytes in byte order (id b is byte b, not
//   GPT-2's bytes_to_unicode order), then one token per merge in the order learnt, then the special
//   tokens in the order given. A merge whose result has the bytes of an existing token reuses that
//   id (as Hugging Face's trainer does), so there can be more merges than merged tokens. A loaded
//   tokenizer keeps whatever ids vocab.json gives (GPT-2's own files put byte 0x21 '!' at id 0).
//
// Note [BPE pre-tokens]
//   Merges never cross pre-token boundaries. Pre-tokens follow GPT-2's pattern
//     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//   matched by hand on bytes: letters are ASCII letters and every byte >= 0x80 (so any UTF-8
//   multi-byte character counts as a letter, including non-letters such as U+2014 or U+00A0),
//   numbers are ASCII digits, whitespace is " \t\n\v\f\r". Special tokens are cut out of the text
//   first, wherever they occur (the earliest, then the longest at one position), in training and
//   in encoding.
//
// Note [BPE training]
//   Words (pre-tokens) are counted once; then the most frequent adjacent pair of tokens, summed
//   over words weighted by their counts, is merged, until the vocabulary (bytes + merged tokens +
//   specials) reaches vocab_size or no pair occurs min_frequency times. Ties go to the pair whose
//   (left bytes, right bytes) is lexicographically smallest, comparing bytes as unsigned. A pair
//   is merged left to right within a word ("aaa" with "a a" gives "aa a"). A merge whose token
//   would have the same vocab.json string as a special token is never learnt.
//
// Note [BPE files] (Hugging Face's GPT-2 pair; transformers.GPT2TokenizerFast(vocab, merges) reads
// them, treating "<|endoftext|>" as special; other specials must be passed to it as such)
//   vocab.json: one JSON object, token string -> id, one member per line in id order. A token's
//     string is its bytes mapped one by one through GPT-2's bytes_to_unicode (a space is "Ġ", a
//     newline "Ċ"); a special token is written as it is.
//   merges.txt: "#version: 0.2", then one merge per line in rank order: the two tokens' strings
//     separated by one space (the mapping never produces a space).
//   Reading them: the 256 single-byte strings must be in vocab.json; every other entry is a merged
//   token if some merge produces it and a special token otherwise; ids must be 0..N-1, each once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/export.h"

namespace loom::data {

struct BpeTrainOptions {
  // The whole vocabulary: 256 bytes + merged tokens + special tokens.
  int64_t vocab_size = 4096;
  // A pair occurring fewer times than this (over the whole text) is never merged.
  int64_t min_frequency = 2;
  // Non-empty, distinct, valid UTF-8, and not the vocab.json string of a single byte.
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
};

// One merge, in rank order: tokens `left` and `right` make token `result`.
struct BpeMerge {
  int32_t left = 0;
  int32_t right = 0;
  int32_t result = 0;
};

// The pre-tokens of `text` (Note [BPE pre-tokens]; special tokens are not cut out here), as views
// into it. They tile the text: concatenated they give it back.
LOOM_API std::vector<std::string_view> bpe_pre_tokenize(std::string_view text);

// GPT-2's bytes_to_unicode: each byte as the UTF-8 of its stand-in character ("Ġ" for a space),
// and back; nullopt when `text` holds a character that stands for no byte, or invalid UTF-8.
LOOM_API std::string bpe_bytes_to_unicode(std::string_view bytes);
LOOM_API std::optional<std::string> bpe_unicode_to_bytes(std::string_view text);

class LOOM_API BpeTokenizer {
 public:
  // Learns merges from `text` (Note [BPE training]). ValueError for a vocab_size below 256 + the
  // number of specials, a negative min_frequency or a bad special token.
  static BpeTokenizer train(std::string_view text, const BpeTrainOptions& options = {});
  // Reads dir/vocab.json and dir/merges.txt (Note [BPE files]).
  static BpeTokenizer load(const std::string& dir);
  // Writes dir/vocab.json and dir/merges.txt, each atomically (a temporary file renamed over it);
  // creates dir. DataError naming the path when it cannot.
  void save(const std::string& dir) const;

  // Special tokens map to their ids; every other byte ends up in some token.
  std::vector<int32_t> encode(std::string_view text) const;
  // The tokens' bytes concatenated. ValueError naming the id and its position for an id outside
  // [0, vocab_size()).
  std::string decode(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const;
  const std::vector<BpeMerge>& merges() const;
  const std::vector<std::string>& special_tokens() const;
  // The id of the token with these bytes (a special token's text first), or nullopt.
  std::optional<int32_t> token_id(std::string_view bytes) const;
  // A token's bytes (a special token's text). ValueError when id is out of range.
  const std::string& token_bytes(int32_t id) const;
  bool is_special(int32_t id) const;
  // One line: vocabulary size and its parts, merges, special tokens.
  std::string describe() const;

 private:
  struct Impl;
  explicit BpeTokenizer(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;  // never null; shared by copies
};

}  // namespace loom::data
