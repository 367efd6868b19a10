// Byte-level BPE training (see loom/data/bpe.h, Note [BPE training]): BpeTokenizer::train, which
// counts the text's pre-tokens and learns merges by incremental pair counts.
#include <algorithm>
#include <queue>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "data/bpe_internal.h"
#include "loom/data/bpe.h"
#include "loom/error.h"

namespace loom::data {

using bpe_detail::for_each_pre_token;
using bpe_detail::json_quoted;
using bpe_detail::kNumBytes;
using bpe_detail::pair_key;
using bpe_detail::split_specials;

namespace {

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80                 ? 1
                     : c >= 0xC2 && c <= 0xDF ? 2
                     : c >= 0xE0 && c <= 0xEF ? 3
                     : c >= 0xF0 && c <= 0xF4 ? 4
                                              : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : c & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    const uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if ((n > 1 && cp < min) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Training (Note [BPE training])

struct Word {
  std::vector<int32_t> symbols;
  int64_t count = 0;
};

struct PairStats {
  int64_t count = 0;
  // Words that held the pair when they were added; some may have lost it since (checked on use).
  std::vector<int32_t> words;
};

struct Candidate {
  int64_t count = 0;
  int32_t left = 0;
  int32_t right = 0;
};

// Note [BPE training: incremental counts]
//   Pair counts are kept for the whole corpus, with the words each pair occurs in. A merge
//   visits only the words holding its pair, subtracts their old pairs and adds their new ones.
//   Only pairs that contain the merge's result can gain count, and they are pushed on the heap;
//   every other pair only loses count, so its heap entry may be stale but never too low: a popped
//   entry whose count differs from the current one is pushed again with the current count
//   (lazy invalidation), and the top entry that matches is the true maximum.
class Trainer {
 public:
  Trainer(std::vector<std::string>* tokens, const BpeTrainOptions& options)
      : tokens_(*tokens), options_(options) {
    for (const std::string& s : options.special_tokens) reserved_.insert(s);
    for (int32_t id = 0; id < static_cast<int32_t>(tokens_.size()); ++id) ids_[tokens_[id]] = id;
  }

  void add_word(std::string_view bytes, int64_t count) {
    Word w;
    w.count = count;
    w.symbols.reserve(bytes.size());
    for (const char c : bytes) w.symbols.push_back(static_cast<unsigned char>(c));
    words_.push_back(std::move(w));
  }

  std::vector<BpeMerge> run() {
    count_all_pairs();
    std::vector<BpeMerge> merges;
    std::vector<int64_t> visited(words_.size(), -1);
    const auto specials = static_cast<int64_t>(options_.special_tokens.size());
    while (static_cast<int64_t>(tokens_.size()) + specials < options_.vocab_size &&
           !heap_.empty()) {
      const Candidate top = heap_.top();
      heap_.pop();
      const uint64_t key = pair_key(top.left, top.right);
      if (!forbidden_.empty() && forbidden_.count(key)) continue;
      auto it = pairs_.find(key);
      const int64_t current = it == pairs_.end() ? 0 : it->second.count;
      if (current != top.count) {
        if (current > 0) heap_.push({current, top.left, top.right});
        continue;
      }
      if (current < options_.min_frequency) break;
      std::string merged = tokens_[top.left] + tokens_[top.right];
      if (!reserved_.empty() && reserved_.count(bpe_bytes_to_unicode(merged))) {
        forbidden_.insert(key);
        continue;
      }
      auto [found, added] = ids_.try_emplace(merged, static_cast<int32_t>(tokens_.size()));
      if (added) tokens_.push_back(std::move(merged));
      const BpeMerge merge{top.left, top.right, found->second};
      merges.push_back(merge);

      const std::vector<int32_t> holders = std::move(it->second.words);
      touched_.clear();
      for (const int32_t w : holders) {
        if (visited[w] == static_cast<int64_t>(merges.size())) continue;
        visited[w] = static_cast<int64_t>(merges.size());
        merge_in_word(w, merge);
      }
      it = pairs_.find(key);
      LOOM_INTERNAL_ASSERT(it != pairs_.end(), "[bpe] a merged pair left the pair table");
      LOOM_INTERNAL_ASSERT(it->second.count == 0, "[bpe] merged pair (", top.left, ", ", top.right,
                           ") is left with count ", it->second.count);
      pairs_.erase(it);
      std::sort(touched_.begin(), touched_.end());
      touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
      for (const uint64_t p : touched_) {
        const int64_t count = pairs_[p].count;
        if (count > 0) {
          heap_.push({count, static_cast<int32_t>(p >> 32), static_cast<int32_t>(p & 0xFFFFFFFF)});
        }
      }
    }
    return merges;
  }

 private:
  void count_all_pairs() {
    for (int32_t w = 0; w < static_cast<int32_t>(words_.size()); ++w) {
      const Word& word = words_[w];
      for (size_t i = 0; i + 1 < word.symbols.size(); ++i) {
        PairStats& s = pairs_[pair_key(word.symbols[i], word.symbols[i + 1])];
        s.count += word.count;
        if (s.words.empty() || s.words.back() != w) s.words.push_back(w);
      }
    }
    for (const auto& [key, stats] : pairs_) {
      heap_.push(
          {stats.count, static_cast<int32_t>(key >> 32), static_cast<int32_t>(key & 0xFFFFFFFF)});
    }
  }

  void merge_in_word(int32_t w, const BpeMerge& m) {
    Word& word = words_[w];
    std::vector<int32_t>& s = word.symbols;
    bool holds = false;
    for (size_t i = 0; i + 1 < s.size() && !holds; ++i)
      holds = s[i] == m.left && s[i + 1] == m.right;
    if (!holds) return;
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      pairs_.find(pair_key(s[i], s[i + 1]))->second.count -= word.count;
    }
    size_t out = 0;
    for (size_t i = 0; i < s.size(); ++out) {
      if (i + 1 < s.size() && s[i] == m.left && s[i + 1] == m.right) {
        s[out] = m.result;
        i += 2;
      } else {
        s[out] = s[i++];
      }
    }
    s.resize(out);
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      const uint64_t key = pair_key(s[i], s[i + 1]);
      PairStats& p = pairs_[key];
      p.count += word.count;
      if (s[i] == m.result || s[i + 1] == m.result) {
        if (p.words.empty() || p.words.back() != w) p.words.push_back(w);
        touched_.push_back(key);
      }
    }
  }

  // Higher count first; on a tie the smaller (left bytes, right bytes).
  struct LowerPriority {
    const std::vector<std::string>* tokens;
    bool operator()(const Candidate& x, const Candidate& y) const {
      if (x.count != y.count) return x.count < y.count;
      if (const int c = (*tokens)[x.left].compare((*tokens)[y.left])) return c > 0;
      return (*tokens)[x.right].compare((*tokens)[y.right]) > 0;
    }
  };

  std::vector<std::string>& tokens_;
  const BpeTrainOptions& options_;
  std::unordered_map<std::string, int32_t> ids_;  // token bytes -> id
  std::unordered_set<std::string> reserved_;      // vocab.json strings of the special tokens
  std::unordered_set<uint64_t> forbidden_;        // pairs whose result would clash with them
  std::vector<Word> words_;
  std::unordered_map<uint64_t, PairStats> pairs_;
  std::priority_queue<Candidate, std::vector<Candidate>, LowerPriority> heap_{
      LowerPriority{&tokens_}};
  std::vector<uint64_t> touched_;  // pairs holding the current merge's result
};

}  // namespace

BpeTokenizer BpeTokenizer::train(std::string_view text, const BpeTrainOptions& options) {
  const std::vector<std::string>& specials = options.special_tokens;
  const auto min_vocab = kNumBytes + static_cast<int64_t>(specials.size());
  LOOM_CHECK(options.vocab_size >= min_vocab && options.vocab_size <= INT32_MAX,
             "[bpe] train: vocab_size must hold the ", kNumBytes, " byte tokens and the ",
             specials.size(), " special tokens (at least ", min_vocab,
             ") and fit in int32, but got ", options.vocab_size);
  LOOM_CHECK(options.min_frequency >= 0, "[bpe] train: min_frequency must be >= 0 but got ",
             options.min_frequency);
  for (size_t k = 0; k < specials.size(); ++k) {
    const std::string& s = specials[k];
    LOOM_CHECK(!s.empty(), "[bpe] train: special token ", k, " is empty");
    LOOM_CHECK(valid_utf8(s), "[bpe] train: special token ", k,
               " is not valid UTF-8 (vocab.json could not hold it)");
    const auto bytes = bpe_unicode_to_bytes(s);
    LOOM_CHECK(!bytes || bytes->size() != 1, "[bpe] train: special token ", json_quoted(s),
               " is the vocab.json string of byte ", static_cast<int>((*bytes)[0] & 0xFF));
    for (size_t j = 0; j < k; ++j) {
      LOOM_CHECK(specials[j] != s, "[bpe] train: special token ", json_quoted(s),
                 " is given twice");
    }
  }

  auto impl = std::make_shared<Impl>();
  for (int b = 0; b < kNumBytes; ++b) {
    impl->tokens.emplace_back(1, static_cast<char>(b));
    impl->byte_ids[b] = b;
  }
  Trainer trainer(&impl->tokens, options);
  std::unordered_map<std::string_view, int64_t> word_counts;
  split_specials(
      text, specials,
      [&](std::string_view segment) {
        for_each_pre_token(segment, [&](std::string_view piece) { ++word_counts[piece]; });
      },
      [](size_t) {});
  for (const auto& [word, count] : word_counts) trainer.add_word(word, count);
  impl->merges = trainer.run();
  impl->special.assign(impl->tokens.size(), 0);
  for (const std::string& s : specials) {
    impl->tokens.push_back(s);
    impl->special.push_back(1);
  }
  impl->index();
  return BpeTokenizer(std::move(impl));
}

}  // namespace loom::data
