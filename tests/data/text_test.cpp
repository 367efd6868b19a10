// Text corpora and token shards (loom/data/text.h): fortune files split into documents, the splits
// and windows of Note [Text shards] checked against the tokenizer's own encoding of the expected
// text, the cache reused until a source file changes, and errors naming the directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom/data/bpe.h"
#include "loom/data/shard.h"
#include "loom/data/text.h"
#include "loom/error.h"
#include "temp_dir.h"

namespace loom::data {
namespace {

using loom::testing::TempDir;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

// Every window's tokens, in dataset order.
std::vector<std::vector<int32_t>> windows(const std::string& dir) {
  ShardReader r(dir);
  std::vector<std::vector<int32_t>> out;
  std::string buf, scratch;
  for (int64_t i = 0; i < r.size(); ++i) {
    const SampleView::TensorRef t = r.read(i, buf, scratch).tensor(0);
    const auto* p = static_cast<const int32_t*>(t.data);
    out.emplace_back(p, p + t.numel());
  }
  return out;
}

TEST(TextCorpus, FortuneFilesSplitIntoDocuments) {
  TempDir d;
  write(d / "wisdom", "First one.\n%\nSecond,\n  two lines.\n%\n%\nThird\n");
  write(d / "art", "Art % is not a separator\n%\n");
  write(d / "wisdom.dat", "binary index, skipped");
  write(d / "wisdom.u8", "skipped too");
  const TextCorpus c = read_fortunes(d.path());
  ASSERT_EQ(c.files.size(), 2u);  // art, wisdom (name order)
  EXPECT_EQ(c.documents, (std::vector<std::string>{"Art % is not a separator", "First one.",
                                                   "Second,\n  two lines.", "Third"}));
  EXPECT_EQ(c.bytes, 24u + 10u + 20u + 5u);
  TempDir empty;
  write(empty / "blank", "%\n%\n");
  EXPECT_THROW(read_fortunes(empty.path()), DataError);
  try {
    read_fortunes(d / "missing");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("apt-get install fortunes"), std::string::npos);
  }
}

TEST(TextShards, WindowsTileEachSplitsTokenStream) {
  TempDir corpus, cache;
  std::string text;
  std::vector<std::string> docs;
  for (int i = 0; i < 60; ++i) {
    docs.push_back("Fortune number " + std::to_string(i) + ": the quick brown fox " +
                   std::string(static_cast<size_t>(i % 7), 'z') + " jumps over the lazy dog.");
    text += docs.back() + "\n%\n";
  }
  write(corpus / "fox", text);
  TextShardsOptions o;
  o.seq_len = 8;
  o.vocab_size = 300;
  o.val_every = 4;
  o.cache_dir = cache.path();
  const TextShards t = text_shards(corpus.path(), o);
  EXPECT_EQ(t.documents, 60);
  EXPECT_EQ(t.vocab_size, 300);
  const BpeTokenizer tok = BpeTokenizer::load(t.tokenizer);
  // The splits' texts, built independently of text_shards: documents 0, 4, 8, ... validate.
  std::string train_text, val_text;
  for (size_t i = 0; i < docs.size(); ++i) {
    std::string& into = i % 4 == 0 ? val_text : train_text;
    if (!into.empty()) into += "<|endoftext|>";
    into += docs[i];
  }
  for (const auto& [dir, split_text, count] : {std::make_tuple(t.train, train_text, t.train_tokens),
                                               std::make_tuple(t.val, val_text, t.val_tokens)}) {
    const std::vector<int32_t> stream = tok.encode(split_text);
    EXPECT_EQ(static_cast<int64_t>(stream.size()), count);
    const auto w = windows(dir);
    ASSERT_EQ(static_cast<int64_t>(w.size()), (count - 1) / 8) << dir;
    for (size_t k = 0; k < w.size(); ++k) {
      ASSERT_EQ(w[k].size(), 9u);
      EXPECT_TRUE(
          std::equal(w[k].begin(), w[k].end(), stream.begin() + static_cast<int64_t>(8 * k)))
          << dir << " window " << k;
    }
  }
  EXPECT_NE(tok.decode(windows(t.val)[0]).find("Fortune number 0"), std::string::npos);
  // Derived once: a second call reads the cache; a changed source file derives again.
  const auto stamp = std::filesystem::last_write_time(t.train + "/index.json");
  const TextShards again = text_shards(corpus.path(), o);
  EXPECT_EQ(again.train_tokens, t.train_tokens);
  EXPECT_EQ(std::filesystem::last_write_time(t.train + "/index.json"), stamp);
  write(corpus / "fox", text + "One more fortune, long enough to change the file's size.\n");
  const TextShards changed = text_shards(corpus.path(), o);
  EXPECT_EQ(changed.documents, 61);
  EXPECT_NE(changed.describe().find("61 documents"), std::string::npos) << changed.describe();
  o.seq_len = 0;
  EXPECT_THROW(text_shards(corpus.path(), o), ValueError);
}

}  // namespace
}  // namespace loom::data
