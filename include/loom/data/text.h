// Text for language models (data layer): a corpus of documents read from files (Debian's
// `fortunes` collection by default), a byte-level BPE tokenizer trained on its training documents
// (bpe.h), and the tokens of each split packed into shards (shard.h) of fixed-length windows that
// the loader shuffles and resumes like any dataset.
//
// Note [Text shards]
//   Documents go to the validation split one in `val_every` (the 0th, the val_every-th, ...), the
//   rest to training: held-out text, not a held-out tail of one stream. Each split is its documents
//   joined by the tokenizer's first special token (<|endoftext|>), encoded as one stream, cut into
//   windows of seq_len + 1 tokens that overlap by one token (window w holds tokens
//   [w seq_len, (w + 1) seq_len]): a language model reads tokens [0, seq_len) and predicts
//   [1, seq_len] of a window, so every token of the stream but the first is a target exactly once.
//   The last partial window is dropped. Column "tokens": int32 [seq_len + 1].
//
//   The tokenizer (dir/tokenizer: vocab.json and merges.txt, Hugging Face's GPT-2 files) and both
//   splits are derived data under the cache directory, in a folder named after the options; the
//   shards' index records the source files (paths, sizes, modification times) and the options, so a
//   changed corpus is packed again. Concurrent callers (several ranks) are serialised by a lock
//   file, so the work is done once.
//
// Errors: DataError naming the directory or file when the corpus is missing, unreadable or empty;
// ValueError for options out of range.
//
// Thread-safety: the functions use only their arguments (and the files).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::data {

struct TextCorpus {
  std::vector<std::string> documents;
  std::vector<std::string> files;  // read, in order
  uint64_t bytes = 0;              // of the documents together
};

// The fortune files under `dir`: every regular file directly in it whose name has no extension
// (the .dat indexes and .u8 files are skipped), in name order; a document is the text between
// lines holding only "%". Empty documents are dropped. DataError naming `dir` when it is missing
// (with the package to install) or holds no document.
LOOM_API TextCorpus read_fortunes(const std::string& dir);
// $LOOM_FORTUNES_DIR, else /usr/share/games/fortunes (Debian's `fortunes` package).
LOOM_API std::string default_fortunes_dir();

struct TextShardsOptions {
  int64_t seq_len = 64;
  int64_t vocab_size = 2048;  // of the BPE tokenizer, its special token included
  int64_t val_every = 20;     // one document in val_every goes to the validation split
  std::string cache_dir;      // "": default_cache_dir()
};

struct LOOM_API TextShards {
  std::string dir;         // the folder of these options under the cache directory
  std::string tokenizer;   // dir/tokenizer (vocab.json, merges.txt)
  std::string train, val;  // shard datasets
  int64_t seq_len = 0, vocab_size = 0;
  int64_t documents = 0, train_tokens = 0, val_tokens = 0;
  uint64_t corpus_bytes = 0;
  // "fortunes: 4.3 MB in 15732 documents -> 1.2M train / 61.3k validation tokens (BPE 2048),
  // windows of 64"
  std::string describe() const;
};

// The tokenizer and both splits of the corpus under `corpus_dir` (read_fortunes), derived once
// (Note [Text shards]).
LOOM_API TextShards text_shards(const std::string& corpus_dir, const TextShardsOptions& options);

}  // namespace loom::data
