// Byte-level BPE: training against a naive trainer written here (all pairs recounted each merge),
// encoding against GPT-2's bpe() loop written here, pre-tokens against std::regex running GPT-2's
// pattern, byte-exact round trips, the Hugging Face files and their errors.
#include "loom/data/bpe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "loom/error.h"
#include "loom/json.h"
#include "temp_dir.h"
#include "test_errors.h"

namespace loom::data {
namespace {

using loom::testing::error_of;
using loom::testing::TempDir;
using Pair = std::pair<std::string, std::string>;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// ---------------------------------------------------------------------------------------------
// References

// GPT-2's pattern run by std::regex over a copy of the text in which every byte >= 0x80 became
// 'a' (a letter, as loom classifies it); \s in the "C" locale is " \t\n\v\f\r".
std::vector<std::string> regex_pre_tokens(const std::string& text) {
  static const std::regex pattern(
      R"('s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+)");
  std::string ascii = text;
  for (char& c : ascii) c = static_cast<unsigned char>(c) >= 0x80 ? 'a' : c;
  std::vector<std::string> out;
  size_t expected_at = 0;
  for (auto it = std::sregex_iterator(ascii.begin(), ascii.end(), pattern);
       it != std::sregex_iterator(); ++it) {
    const size_t at = static_cast<size_t>(it->position());
    EXPECT_EQ(at, expected_at) << "the pattern skipped bytes";
    out.push_back(text.substr(at, static_cast<size_t>(it->length())));
    expected_at = at + static_cast<size_t>(it->length());
  }
  EXPECT_EQ(expected_at, text.size());
  return out;
}

// Words and counts as training sees them: special tokens cut out, then pre-tokens.
std::map<std::string, int64_t> count_words(const std::string& text,
                                           const std::vector<std::string>& specials) {
  std::map<std::string, int64_t> words;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t at = std::string::npos, len = 0;
    for (const std::string& s : specials) {
      const size_t f = text.find(s, pos);
      if (f < at || (f == at && s.size() > len)) at = f, len = s.size();
    }
    const std::string segment = text.substr(pos, at == std::string::npos ? at : at - pos);
    for (const std::string& w : regex_pre_tokens(segment)) ++words[w];
    if (at == std::string::npos) break;
    pos = at + len;
  }
  return words;
}

// The naive trainer: recount every pair each round; highest count, ties to the smallest
// (left bytes, right bytes) pair.
std::vector<Pair> naive_merges(const std::string& text, int64_t vocab_size, int64_t min_frequency,
                               const std::vector<std::string>& specials) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [w, n] : count_words(text, specials)) {
    std::vector<std::string> symbols;
    for (const char c : w) symbols.emplace_back(1, c);
    words.emplace_back(std::move(symbols), n);
  }
  std::set<std::string> vocab;
  for (int b = 0; b < 256; ++b) vocab.insert(std::string(1, static_cast<char>(b)));
  std::vector<Pair> merges;
  while (static_cast<int64_t>(vocab.size() + specials.size()) < vocab_size) {
    std::map<Pair, int64_t> counts;
    for (const auto& [symbols, n] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) counts[{symbols[i], symbols[i + 1]}] += n;
    }
    const Pair* best = nullptr;
    int64_t best_count = 0;
    for (const auto& [pair, n] : counts) {
      if (n > best_count) best = &pair, best_count = n;
    }
    if (best == nullptr || best_count < min_frequency) break;
    const Pair merge = *best;
    merges.push_back(merge);
    vocab.insert(merge.first + merge.second);
    for (auto& [symbols, n] : words) {
      std::vector<std::string> out;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == merge.first && symbols[i + 1] == merge.second) {
          out.push_back(merge.first + merge.second);
          i += 2;
        } else {
          out.push_back(symbols[i++]);
        }
      }
      symbols = std::move(out);
    }
  }
  return merges;
}

std::vector<Pair> merges_as_bytes(const BpeTokenizer& tok) {
  std::vector<Pair> out;
  for (const BpeMerge& m : tok.merges())
    out.emplace_back(tok.token_bytes(m.left), tok.token_bytes(m.right));
  return out;
}

// GPT-2's encoder.py bpe(): merge every occurrence of the lowest-ranked pair, left to right,
// until no pair has a rank; then look the pieces up.
std::vector<int32_t> reference_encode(const BpeTokenizer& tok, const std::string& text) {
  std::map<Pair, size_t> ranks;
  const std::vector<Pair> merges = merges_as_bytes(tok);
  for (size_t r = 0; r < merges.size(); ++r) ranks.emplace(merges[r], r);
  std::vector<int32_t> ids;
  for (const std::string& piece : regex_pre_tokens(text)) {
    std::vector<std::string> word;
    for (const char c : piece) word.emplace_back(1, c);
    while (word.size() > 1) {
      size_t best = SIZE_MAX;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const auto it = ranks.find({word[i], word[i + 1]});
        if (it != ranks.end()) best = std::min(best, it->second);
      }
      if (best == SIZE_MAX) break;
      const Pair& m = merges[best];
      std::vector<std::string> out;
      for (size_t i = 0; i < word.size();) {
        if (i + 1 < word.size() && word[i] == m.first && word[i + 1] == m.second) {
          out.push_back(m.first + m.second);
          i += 2;
        } else {
          out.push_back(word[i++]);
        }
      }
      word = std::move(out);
    }
    for (const std::string& w : word) {
      const auto id = tok.token_id(w);
      EXPECT_TRUE(id.has_value()) << "no token for " << w;
      ids.push_back(id.value_or(-1));
    }
  }
  return ids;
}

// GPT-2's bytes_to_unicode, as its Python source builds it; the UTF-8 of byte b's stand-in.
std::string stand_in(int b) {
  std::vector<int> bs;
  for (int c = '!'; c <= '~'; ++c) bs.push_back(c);
  for (int c = 0xA1; c <= 0xAC; ++c) bs.push_back(c);
  for (int c = 0xAE; c <= 0xFF; ++c) bs.push_back(c);
  std::vector<int> cs = bs;
  int n = 0;
  for (int c = 0; c < 256; ++c) {
    if (std::find(bs.begin(), bs.end(), c) == bs.end()) bs.push_back(c), cs.push_back(256 + n++);
  }
  const int cp = cs[std::find(bs.begin(), bs.end(), b) - bs.begin()];
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

// A few KB of varied text: English prose, contractions, digits, punctuation, runs of spaces,
// tabs and newlines, UTF-8, and special tokens between documents.
std::string corpus() {
  std::string text =
      "The quick brown fox jumps over the lazy dog. The dog didn't care; it's the fox's "
      "problem, isn't it? We'll see what they've got: 3 foxes, 12 dogs and 1024 cats.\n\n"
      "In the beginning the  universe was   created. This has made a lot of people very angry "
      "and been widely regarded as a bad move.\n"
      "naïve café 東京 — naïve café, 東京! Ünïcödé text: straße, 日本語, emoji "
      "🙂🙂.\n"
      "\tIndented\tline with\ttabs;   and   trailing spaces   \n"
      "Prices: $3.14, $2.71, 100% of 2024's budget (approx. 1,000,000).\r\n"
      "<|endoftext|>A new document starts here. The end of the old one was the end.\n";
  const char* words[] = {"the",   "The",    "of",    "and",    "to",   "in",      "is",   "it's",
                         "don't", "we're",  "I'm",   "you'll", "he'd", "they've", "café", "naïve",
                         "東京",  "2024",   "3.14",  "42",     "...",  "!!",      "--",   "(x)",
                         "token", "tokens", "merge", "merges", "pair", "pairs",   "byte", "bytes"};
  const char* gaps[] = {" ", " ", " ", " ", "  ", "   ", "\n", "\n\n", "\t", " \n", ", ", ". "};
  // Made-up words from syllables give many distinct words, hence many pairs to merge.
  const char* syllables[] = {"ka", "lo", "mi", "ne", "ru", "sha", "to", "vi",  "zen", "qu",
                             "ar", "el", "is", "on", "ux", "bra", "ch", "ing", "ed",  "ly"};
  std::mt19937 rng(1234);
  for (int i = 0; i < 1000; ++i) {
    if (rng() % 2) {
      text += words[rng() % std::size(words)];
    } else {
      for (int k = 1 + static_cast<int>(rng() % 3); k > 0; --k) {
        text += syllables[rng() % std::size(syllables)];
      }
    }
    text += gaps[rng() % std::size(gaps)];
    if (rng() % 250 == 0) text += "<|endoftext|>";
  }
  return text;
}

std::string without_specials(std::string text) {
  for (size_t at; (at = text.find("<|endoftext|>")) != std::string::npos;) text.erase(at, 13);
  return text;
}

BpeTokenizer trained(int64_t vocab_size = 400) {
  BpeTrainOptions options;
  options.vocab_size = vocab_size;
  return BpeTokenizer::train(corpus(), options);
}

// ---------------------------------------------------------------------------------------------
// Training

TEST(BpeTrain, MatchesNaiveTrainerStoppingAtVocabSize) {
  const std::string text = corpus();
  ASSERT_GT(text.size(), 4000u);
  BpeTrainOptions options;
  options.vocab_size = 420;
  options.min_frequency = 1;
  const BpeTokenizer tok = BpeTokenizer::train(text, options);
  const std::vector<Pair> expected = naive_merges(text, 420, 1, options.special_tokens);
  EXPECT_EQ(merges_as_bytes(tok), expected);
  EXPECT_EQ(tok.vocab_size(), 420);
  EXPECT_EQ(tok.token_bytes(419), "<|endoftext|>");
  EXPECT_TRUE(tok.is_special(419));
}

TEST(BpeTrain, MatchesNaiveTrainerStoppingAtMinFrequency) {
  const std::string text = corpus();
  for (const int64_t min_frequency : {2, 5}) {
    BpeTrainOptions options;
    options.vocab_size = 100000;
    options.min_frequency = min_frequency;
    options.special_tokens = {"<|endoftext|>", "<pad>"};
    const BpeTokenizer tok = BpeTokenizer::train(text, options);
    const std::vector<Pair> expected =
        naive_merges(text, options.vocab_size, min_frequency, options.special_tokens);
    EXPECT_EQ(merges_as_bytes(tok), expected) << "min_frequency " << min_frequency;
    EXPECT_LT(tok.vocab_size(), options.vocab_size);
    EXPECT_GT(tok.merges().size(), 100u);
    EXPECT_EQ(tok.special_tokens(), options.special_tokens);
  }
}

TEST(BpeTrain, WikipediaExample) {
  BpeTrainOptions options;
  options.vocab_size = 1000;
  options.min_frequency = 2;
  options.special_tokens = {};
  const BpeTokenizer tok = BpeTokenizer::train("aaabdaaabac", options);
  // aa:4 first; then "a b" and "aa a" tie at 2 and ("a","b") < ("aa","a"); then "aa ab" (2);
  // every pair left occurs once.
  const std::vector<Pair> expected = {{"a", "a"}, {"a", "b"}, {"aa", "ab"}};
  EXPECT_EQ(merges_as_bytes(tok), expected);
  EXPECT_EQ(tok.vocab_size(), 259);
  std::vector<std::string> pieces;
  for (const int32_t id : tok.encode("aaabdaaabac")) pieces.push_back(tok.token_bytes(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"aaab", "d", "aaab", "a", "c"}));
}

TEST(BpeTrain, RejectsBadOptions) {
  BpeTrainOptions options;
  options.vocab_size = 256;  // no room for <|endoftext|>
  EXPECT_CONTAINS(error_of<ValueError>([&] { BpeTokenizer::train("abc", options); }),
                  "at least 257");
  options.vocab_size = 300;
  options.special_tokens = {"<a>", "<a>"};
  EXPECT_CONTAINS(error_of<ValueError>([&] { BpeTokenizer::train("abc", options); }),
                  "given twice");
  options.special_tokens = {""};
  EXPECT_CONTAINS(error_of<ValueError>([&] { BpeTokenizer::train("abc", options); }), "empty");
  options.special_tokens = {"Ġ"};  // the vocab.json string of byte ' '
  EXPECT_CONTAINS(error_of<ValueError>([&] { BpeTokenizer::train("abc", options); }), "byte 32");
  options.special_tokens = {"\xff"};
  EXPECT_CONTAINS(error_of<ValueError>([&] { BpeTokenizer::train("abc", options); }), "UTF-8");
}

TEST(BpeTrain, NeverLearnsATokenThatClashesWithASpecial) {
  // The special "Ġthe" and the token " the" would both be "Ġthe" in vocab.json.
  const TempDir dir("loom-bpe");
  BpeTrainOptions options;
  options.vocab_size = 300;
  options.special_tokens = {"Ġthe"};
  const BpeTokenizer tok = BpeTokenizer::train("the the the the then then", options);
  EXPECT_FALSE(tok.token_id(" the").has_value());
  EXPECT_TRUE(tok.token_id(" then").has_value());  // learnt around it
  EXPECT_EQ(tok.token_id("Ġthe"), tok.vocab_size() - 1);
  tok.save(dir.path());
  const BpeTokenizer back = BpeTokenizer::load(dir.path());
  EXPECT_EQ(back.special_tokens(), options.special_tokens);
  EXPECT_EQ(back.encode("Ġthe the"), tok.encode("Ġthe the"));
}

// ---------------------------------------------------------------------------------------------
// Pre-tokens

TEST(BpePreTokenize, HandWrittenSplits) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(bpe_pre_tokenize("Hello world's 123 foo"),
            (V{"Hello", " world", "'s", " 123", " foo"}));
  EXPECT_EQ(bpe_pre_tokenize("I'm  here\n\nnow"), (V{"I", "'m", " ", " here", "\n", "\n", "now"}));
  EXPECT_EQ(bpe_pre_tokenize("x   "), (V{"x", "   "}));
  EXPECT_EQ(bpe_pre_tokenize("3.14$ ok!!"), (V{"3", ".", "14", "$", " ok", "!!"}));
  EXPECT_EQ(bpe_pre_tokenize("naïve café 東京"), (V{"naïve", " café", " 東京"}));
  EXPECT_EQ(bpe_pre_tokenize("don't 'sup 'S we'll"),
            (V{"don", "'t", " '", "sup", " '", "S", " we", "'ll"}));
  EXPECT_EQ(bpe_pre_tokenize("\t\tfoo"), (V{"\t", "\t", "foo"}));
  EXPECT_EQ(bpe_pre_tokenize(" \n x"), (V{" \n", " x"}));
  EXPECT_EQ(bpe_pre_tokenize("''s a,b"), (V{"''", "s", " a", ",", "b"}));
  EXPECT_EQ(bpe_pre_tokenize("<|endoftext|>"), (V{"<|", "endoftext", "|>"}));
  EXPECT_EQ(bpe_pre_tokenize(""), V{});
}

TEST(BpePreTokenize, MatchesRegexOnRandomStrings) {
  const std::string alphabet[] = {" ",    " ",   " ", "\n", "\t",
                                  "\r",   "\v",  "a", "Z",  "0",
                                  "9",    "'",   "s", "t",  "r",
                                  "e",    "l",   "d", "m",  "v",
                                  ".",    "!",   "é", "東", std::string(1, '\0'),
                                  "\x7f", "\xff"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string s;
    const int len = static_cast<int>(rng() % 40);
    for (int i = 0; i < len; ++i) s += alphabet[rng() % std::size(alphabet)];
    std::vector<std::string> got;
    for (const std::string_view p : bpe_pre_tokenize(s)) got.emplace_back(p);
    ASSERT_EQ(got, regex_pre_tokens(s)) << "text: " << Json(s).dump();
  }
}

TEST(BpeEncode, TokensNeverCrossPreTokenBoundaries) {
  const BpeTokenizer tok = trained();
  for (const std::string& text : std::vector<std::string>{
           "Hello world's 123 foo", "the  theory\n\nthe end... 3.14159 the-the",
           without_specials(corpus())}) {
    std::set<size_t> boundaries;
    size_t at = 0;
    for (const std::string& p : regex_pre_tokens(text)) boundaries.insert(at += p.size());
    size_t start = 0;
    for (const int32_t id : tok.encode(text)) {
      const size_t end = start + tok.token_bytes(id).size();
      const auto inside = boundaries.upper_bound(start);
      if (!tok.is_special(id)) {
        EXPECT_TRUE(inside == boundaries.end() || *inside >= end)
            << "token " << Json(tok.token_bytes(id)).dump() << " at " << start
            << " spans a pre-token boundary at " << *inside;
      }
      start = end;
    }
    EXPECT_EQ(start, text.size());
  }
}

// ---------------------------------------------------------------------------------------------
// Encoding

TEST(BpeEncode, MatchesGpt2BpeLoop) {
  const BpeTokenizer tok = trained(490);
  // Texts without special tokens, so the reference needs no special handling.
  const std::string text = without_specials(corpus());
  EXPECT_EQ(tok.encode(text), reference_encode(tok, text));
  const std::string long_word(3000, 'e');  // one pre-token: the heap path on a long input
  EXPECT_EQ(tok.encode(long_word), reference_encode(tok, long_word));
  const std::string spaces(2000, ' ');
  EXPECT_EQ(tok.encode(spaces), reference_encode(tok, spaces));
}

TEST(BpeEncode, RoundTripsArbitraryBytes) {
  const BpeTokenizer tok = trained();
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  std::vector<std::string> texts = {"",
                                    all_bytes,
                                    all_bytes + all_bytes,
                                    "\xff\xfe\xc0\x80 invalid \xed\xa0\x80 UTF-8 \xc3",
                                    std::string(1 << 20, 'a'),
                                    corpus()};
  std::mt19937 rng(99);
  for (int i = 0; i < 50; ++i) {
    std::string s(rng() % 3000, '\0');
    for (char& c : s) c = static_cast<char>(rng());
    texts.push_back(s);
  }
  for (const std::string& text : texts) {
    const std::vector<int32_t> ids = tok.encode(text);
    for (const int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size());
    ASSERT_EQ(tok.decode(ids), text) << "text of " << text.size() << " bytes";
  }
}

TEST(BpeEncode, SpecialTokens) {
  BpeTrainOptions options;
  options.vocab_size = 400;
  options.special_tokens = {"<|endoftext|>", "<|end", "<pad>"};
  const BpeTokenizer tok = BpeTokenizer::train(corpus(), options);
  const int32_t eot = *tok.token_id("<|endoftext|>");
  const int32_t end = *tok.token_id("<|end");
  const int32_t pad = *tok.token_id("<pad>");
  EXPECT_EQ(eot, 397);
  EXPECT_EQ(pad, 399);
  // The longest special wins where two start at one position; text between them encodes alone.
  const std::string text = "the cat<|endoftext|><pad><|end of it<|endoftext|>";
  std::vector<int32_t> expected = tok.encode("the cat");
  expected.insert(expected.end(), {eot, pad, end});
  for (const int32_t id : tok.encode(" of it")) expected.push_back(id);
  expected.push_back(eot);
  EXPECT_EQ(tok.encode(text), expected);
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
  EXPECT_EQ(tok.decode({eot, eot}), "<|endoftext|><|endoftext|>");
}

TEST(BpeEncode, DecodeRejectsOutOfRangeIds) {
  const BpeTokenizer tok = trained();
  EXPECT_CONTAINS(error_of<ValueError>([&] {
                    tok.decode({1, 2, 400});
                  }),
                  "id 400 at position 2 is outside the vocabulary [0, 400)");
  EXPECT_CONTAINS(error_of<ValueError>([&] { tok.decode({-1}); }), "id -1 at position 0");
  EXPECT_CONTAINS(error_of<ValueError>([&] { tok.token_bytes(400); }), "id 400");
}

TEST(BpeEncode, ConcurrentEncodesAgree) {
  const BpeTokenizer tok = trained();
  const std::string text = corpus();
  const std::vector<int32_t> expected = BpeTokenizer(tok).encode(text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  const BpeTokenizer fresh = trained();  // an empty cache, filled by all threads at once
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) got[t] = fresh.encode(text);
    });
  }
  for (auto& th : threads) th.join();
  for (const auto& g : got) EXPECT_EQ(g, expected);
}

TEST(BpeEncode, DescribeNamesTheParts) {
  const BpeTokenizer tok = trained();
  EXPECT_EQ(tok.describe(), "BpeTokenizer: vocab 400 (256 bytes + 143 merged + 1 special), " +
                                std::to_string(tok.merges().size()) +
                                " merges, specials [\"<|endoftext|>\"]");
}

// ---------------------------------------------------------------------------------------------
// Files

TEST(BpeFiles, ByteStandInsAreGpt2s) {
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    ASSERT_EQ(bpe_bytes_to_unicode(byte), stand_in(b)) << "byte " << b;
    ASSERT_EQ(bpe_unicode_to_bytes(stand_in(b)), byte) << "byte " << b;
  }
  EXPECT_EQ(bpe_bytes_to_unicode(" the\n"), "ĠtheĊ");
  EXPECT_EQ(bpe_unicode_to_bytes("<|endoftext|>"), "<|endoftext|>");
  EXPECT_EQ(bpe_unicode_to_bytes("東京"), std::nullopt);  // not stand-ins
  EXPECT_EQ(bpe_unicode_to_bytes("\xc4"), std::nullopt);  // truncated UTF-8
}

TEST(BpeFiles, SaveThenLoadEncodesTheSame) {
  const TempDir dir("loom-bpe");
  const BpeTokenizer tok = trained();
  tok.save(dir / "tok");
  const BpeTokenizer back = BpeTokenizer::load(dir / "tok");
  EXPECT_EQ(back.vocab_size(), tok.vocab_size());
  EXPECT_EQ(merges_as_bytes(back), merges_as_bytes(tok));
  EXPECT_EQ(back.describe(), tok.describe());
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    ASSERT_EQ(back.token_bytes(id), tok.token_bytes(id));
    ASSERT_EQ(back.is_special(id), tok.is_special(id));
  }
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes += static_cast<char>(b);
  for (const std::string& text : {corpus(), all_bytes, std::string("the end<|endoftext|>")}) {
    EXPECT_EQ(back.encode(text), tok.encode(text));
  }

  const std::string vocab_text = read_text(dir / "tok/vocab.json");
  const Json vocab = Json::parse(vocab_text, "vocab.json");
  ASSERT_TRUE(vocab.is_object());
  EXPECT_EQ(vocab.size(), 400u);
  EXPECT_EQ(vocab.at("Ġthe").as_int(), *tok.token_id(" the"));
  EXPECT_EQ(vocab.at("<|endoftext|>").as_int(), 399);
  EXPECT_EQ(vocab.at("Ċ").as_int(), '\n');
  EXPECT_EQ(vocab.at("!").as_int(), '!');
  const std::string merges = read_text(dir / "tok/merges.txt");
  EXPECT_EQ(merges.substr(0, 14), "#version: 0.2\n");
  EXPECT_EQ(std::count(merges.begin(), merges.end(), '\n'),
            static_cast<std::ptrdiff_t>(tok.merges().size() + 1));
  const BpeMerge& first = tok.merges()[0];
  EXPECT_EQ(merges.substr(14, merges.find('\n', 14) - 14),
            bpe_bytes_to_unicode(tok.token_bytes(first.left)) + " " +
                bpe_bytes_to_unicode(tok.token_bytes(first.right)));
  // Atomic writes leave no temporaries behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir / "tok")) ++files;
  EXPECT_EQ(files, 2);
}

// A GPT-2-style pair written by hand: ids in GPT-2's order (bytes_to_unicode's), merges a-b, ab-c.
void write_gpt2_style(const std::string& dir, const std::string& extra_vocab,
                      const std::string& merges) {
  std::filesystem::create_directories(dir);
  std::vector<int> order;
  for (int c = '!'; c <= '~'; ++c) order.push_back(c);
  for (int c = 0xA1; c <= 0xAC; ++c) order.push_back(c);
  for (int c = 0xAE; c <= 0xFF; ++c) order.push_back(c);
  for (int c = 0; c < 256; ++c) {
    if (std::find(order.begin(), order.end(), c) == order.end()) order.push_back(c);
  }
  std::string vocab = "{\n";
  for (int id = 0; id < 256; ++id) {
    vocab += "  " + Json(stand_in(order[id])).dump() + ": " + std::to_string(id) + ",\n";
  }
  vocab += extra_vocab + "\n}\n";
  write_text(dir + "/vocab.json", vocab);
  write_text(dir + "/merges.txt", merges);
}

TEST(BpeFiles, LoadsGpt2OrderAndFindsSpecials) {
  const TempDir dir("loom-bpe");
  write_gpt2_style(dir.path(), "  \"ab\": 256,\n  \"abc\": 257,\n  \"<|endoftext|>\": 258",
                   "#version: 0.2\na b\nab c\n");
  const BpeTokenizer tok = BpeTokenizer::load(dir.path());
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.token_bytes(0), "!");
  EXPECT_EQ(tok.token_bytes(188), std::string(1, '\0'));  // GPT-2's "Ā"
  EXPECT_EQ(tok.special_tokens(), std::vector<std::string>{"<|endoftext|>"});
  EXPECT_EQ(tok.encode("abc abcab<|endoftext|>"),
            (std::vector<int32_t>{257, *tok.token_id(" "), 257, 256, 258}));
}

TEST(BpeFiles, MalformedFilesNameFileAndLine) {
  const TempDir dir("loom-bpe");
  const std::string d = dir.path();
  auto load_error = [&] { return error_of<DataError>([&] { BpeTokenizer::load(d); }); };

  EXPECT_CONTAINS(error_of<DataError>([&] { BpeTokenizer::load(d + "/nowhere"); }),
                  d + "/nowhere/vocab.json does not exist");
  const std::string good_vocab = "  \"ab\": 256,\n  \"abc\": 257";
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nab c\n");
  std::filesystem::remove(d + "/merges.txt");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt does not exist");

  // vocab.json: line 1 is "{", the 256 bytes are lines 2..257, the extras follow.
  write_gpt2_style(d, "  \"ab\" 256", "#version: 0.2\n");
  EXPECT_CONTAINS(load_error(), d + "/vocab.json:258:8: not valid JSON");
  write_gpt2_style(d, "  \"ab\": 256,\n  \"abc\": \"257\"", "#version: 0.2\n");
  EXPECT_CONTAINS(load_error(), d + "/vocab.json:259: token \"abc\" has id \"257\"");
  write_gpt2_style(d, "  \"ab\": 256,\n  \"abc\": 256", "#version: 0.2\n");
  EXPECT_CONTAINS(load_error(),
                  d + "/vocab.json:259: token \"abc\" has id 256, already the id of \"ab\" on "
                      "line 258");
  write_gpt2_style(d, "  \"ab\": 256,\n  \"abc\": 300", "#version: 0.2\n");
  EXPECT_CONTAINS(load_error(), d + "/vocab.json:259: token \"abc\" has id 300");
  write_text(d + "/vocab.json", "[1, 2]");
  EXPECT_CONTAINS(load_error(), d + "/vocab.json:1: expected a JSON object");
  write_text(d + "/vocab.json", "{\"a\": 0}");
  EXPECT_CONTAINS(load_error(), d + "/vocab.json has no token for byte 0 (\"Ā\")");

  // merges.txt
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nabc\n");
  EXPECT_CONTAINS(load_error(),
                  d + "/merges.txt:3: expected two tokens separated by one space but got \"abc\"");
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nab  c\n");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt:3: expected two tokens");
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\n\n");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt:3: expected two tokens");
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nab xyz\n");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt:3: token \"xyz\" of merge \"ab xyz\" is not in");
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nab d\n");
  EXPECT_CONTAINS(
      load_error(),
      d + "/merges.txt:3: merge \"ab d\" makes \"abd\", which is not in " + d + "/vocab.json");
  write_gpt2_style(d, good_vocab, "#version: 0.2\na b\nab c\na b\n");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt:4: merge \"a b\" repeats line 2");
  write_gpt2_style(d, good_vocab + ",\n  \"xy\": 258,\n  \"xyz\": 259",
                   "#version: 0.2\na b\nab c\nxy z\n");
  EXPECT_CONTAINS(load_error(), d + "/merges.txt:4: token \"xy\" is neither a byte nor made by");
  // Without the header every line is a merge.
  write_gpt2_style(d, good_vocab, "a b\nab c\n");
  EXPECT_EQ(BpeTokenizer::load(d).merges().size(), 2u);
}

}  // namespace
}  // namespace loom::data
