// Text corpora, their tokenizer and their token shards (see loom/data/text.h).
#include "loom/data/text.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/cache_internal.h"
#include "loom/config.h"
#include "loom/data/bpe.h"
#include "loom/data/pack.h"
#include "loom/data/shard.h"
#include "loom/error.h"
#include "loom/file.h"
#include "loom/json.h"

namespace loom::data {

namespace fs = std::filesystem;

const config::PathSetting kFortunesDir(
    "LOOM_FORTUNES_DIR", "/usr/share/games/fortunes",
    "where `loom train --model gpt` finds its text (the default is Debian's `fortunes` package)");

std::string default_fortunes_dir() {
  return kFortunesDir.get();
}

namespace {

// The fortune files of `dir`, in name order.
std::vector<std::string> fortune_files(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    LOOM_THROW(DataError, "[data.text] no corpus directory ", dir,
               " (Debian's fortunes are in package `fortunes`: apt-get install fortunes; or set "
               "LOOM_FORTUNES_DIR)");
  std::vector<std::string> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec) || e.is_symlink(ec)) continue;
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] == '.' || e.path().has_extension()) continue;
    files.push_back(e.path().string());
  }
  if (ec) LOOM_THROW(DataError, "[data.text] cannot list ", dir, ": ", ec.message());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TextCorpus read_fortunes(const std::string& dir) {
  TextCorpus c;
  c.files = fortune_files(dir);
  for (const std::string& path : c.files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) LOOM_THROW(DataError, "[data.text] cannot read ", path);
    std::string line, doc;
    auto flush = [&] {
      while (!doc.empty() && (doc.back() == '\n' || doc.back() == ' ')) doc.pop_back();
      if (!doc.empty()) {
        c.bytes += doc.size();
        c.documents.push_back(std::move(doc));
      }
      doc.clear();
    };
    while (std::getline(in, line)) {
      if (line == "%") {
        flush();
      } else {
        (doc += line) += '\n';
      }
    }
    if (in.bad()) LOOM_THROW(DataError, "[data.text] error reading ", path);
    flush();
  }
  LOOM_CHECK_AS(DataError, !c.documents.empty(), "[data.text] ", dir,
                " holds no fortune (no file without an extension, or only empty ones)");
  return c;
}

std::string TextShards::describe() const {
  auto count = [](int64_t n) {
    char b[32];
    if (n >= 1000000) {
      std::snprintf(b, sizeof(b), "%.2fM", static_cast<double>(n) / 1e6);
    } else if (n >= 1000) {
      std::snprintf(b, sizeof(b), "%.1fk", static_cast<double>(n) / 1e3);
    } else {
      std::snprintf(b, sizeof(b), "%lld", static_cast<long long>(n));
    }
    return std::string(b);
  };
  char b[64];
  std::snprintf(b, sizeof(b), "%.2f MB", static_cast<double>(corpus_bytes) / 1e6);
  return std::string(b) + " of text in " + std::to_string(documents) + " documents -> " +
         count(train_tokens) + " train / " + count(val_tokens) + " validation tokens (BPE " +
         std::to_string(vocab_size) + "), windows of " + std::to_string(seq_len) + " at " + dir;
}

namespace {

// The corpus files and the options: what the derived data depends on.
std::string text_identity(const std::vector<std::string>& files, const TextShardsOptions& o) {
  std::string id = "text seq_len " + std::to_string(o.seq_len) + " vocab " +
                   std::to_string(o.vocab_size) + " val_every " + std::to_string(o.val_every);
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) continue;
    ((id += ' ') += f) += ':';
    (id += std::to_string(st.st_size)) += ':';
    id += std::to_string(st.st_mtim.tv_sec);
  }
  return id;
}

// Writes `stream`'s windows (Note [Text shards]) as a dataset at `dir`; returns the windows.
int64_t write_windows(const std::vector<int32_t>& stream, int64_t seq_len, const std::string& dir,
                      const std::string& identity) {
  Schema schema;
  Column col;
  col.name = "tokens";
  col.type = ColumnType::Tensor;
  col.dtype = kInt32;
  col.shape = {seq_len + 1};
  schema.columns.push_back(col);
  ShardWriterOptions wo;
  wo.source = identity;
  ShardWriter w(dir, schema, wo);
  const auto n = static_cast<int64_t>(stream.size());
  for (int64_t at = 0; at + seq_len + 1 <= n; at += seq_len)
    w.add({Value::of_tensor(kInt32, {seq_len + 1}, stream.data() + at)});
  return w.finish();
}

}  // namespace

TextShards text_shards(const std::string& corpus_dir, const TextShardsOptions& o) {
  LOOM_CHECK(o.seq_len >= 1, "[data.text] seq_len must be at least 1 but got ", o.seq_len);
  LOOM_CHECK(o.val_every >= 2, "[data.text] val_every must be at least 2 but got ", o.val_every);
  LOOM_CHECK(o.vocab_size >= 257, "[data.text] vocab_size must be at least 257 (the 256 bytes ",
             "and <|endoftext|>) but got ", o.vocab_size);
  const std::vector<std::string> files = fortune_files(corpus_dir);
  const std::string identity = text_identity(files, o);
  const std::string root = o.cache_dir.empty() ? default_cache_dir() : o.cache_dir;
  const std::string name = "text-" + fs::path(corpus_dir).filename().string() + "-bpe" +
                           std::to_string(o.vocab_size) + "-seq" + std::to_string(o.seq_len);
  TextShards t;
  t.dir = root + "/" + name;
  t.tokenizer = t.dir + "/tokenizer";
  t.train = t.dir + "/train";
  t.val = t.dir + "/val";
  t.seq_len = o.seq_len;
  auto done = [&] {
    if (!packed_from(t.train, identity) || !packed_from(t.val, identity) ||
        !fs::exists(t.dir + "/info.json"))
      return false;
    try {
      const Json info = Json::parse(io::read_file(t.dir + "/info.json"), t.dir + "/info.json");
      if (info.at("source").as_string() != identity) return false;
      t.vocab_size = info.at("vocab_size").as_int();
      t.documents = info.at("documents").as_int();
      t.train_tokens = info.at("train_tokens").as_int();
      t.val_tokens = info.at("val_tokens").as_int();
      t.corpus_bytes = static_cast<uint64_t>(info.at("corpus_bytes").as_int());
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  if (done()) return t;
  std::error_code ec;
  fs::create_directories(t.dir, ec);
  if (ec)
    LOOM_THROW(DataError, "[data.text] cannot create the cache directory ", t.dir, ": ",
               ec.message());
  FileLock lock(root + "/." + name + ".lock");
  if (done()) return t;  // another process derived it while we waited

  const TextCorpus corpus = read_fortunes(corpus_dir);
  std::string train_text, val_text;
  const std::string eot = "<|endoftext|>";
  for (size_t d = 0; d < corpus.documents.size(); ++d) {
    std::string& into = d % static_cast<size_t>(o.val_every) == 0 ? val_text : train_text;
    if (!into.empty()) into += eot;
    into += corpus.documents[d];
  }
  BpeTrainOptions bo;
  bo.vocab_size = o.vocab_size;
  bo.special_tokens = {eot};
  const BpeTokenizer tok = BpeTokenizer::train(train_text, bo);
  tok.save(t.tokenizer);
  const std::vector<int32_t> train_ids = tok.encode(train_text), val_ids = tok.encode(val_text);
  LOOM_CHECK_AS(DataError, static_cast<int64_t>(val_ids.size()) > o.seq_len, "[data.text] ",
                corpus_dir, ": the validation split has ", val_ids.size(),
                " tokens, fewer than one window of ", o.seq_len + 1, " (a corpus this small needs ",
                "a shorter seq_len)");
  write_windows(train_ids, o.seq_len, t.train, identity);
  write_windows(val_ids, o.seq_len, t.val, identity);
  t.vocab_size = tok.vocab_size();
  t.documents = static_cast<int64_t>(corpus.documents.size());
  t.train_tokens = static_cast<int64_t>(train_ids.size());
  t.val_tokens = static_cast<int64_t>(val_ids.size());
  t.corpus_bytes = corpus.bytes;
  Json info = Json::object();
  info.set("source", Json(identity));
  info.set("tokenizer", Json(tok.describe()));
  info.set("vocab_size", Json(t.vocab_size));
  info.set("documents", Json(t.documents));
  info.set("train_tokens", Json(t.train_tokens));
  info.set("val_tokens", Json(t.val_tokens));
  info.set("corpus_bytes", Json(static_cast<int64_t>(t.corpus_bytes)));
  io::atomic_write_file(t.dir + "/info.json", info.dump(2));
  return t;
}

}  // namespace loom::data
