// `loom data inspect DIR [--no-verify] [--show N]`: prints a shard dataset's index (samples,
// shards, columns, sizes, hashes), checks every CRC32C (whole files, tables and samples) and can
// print the first samples' values.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "cli.h"
#include "loom/data/shard.h"
#include "loom/error.h"

namespace loom::cli {
namespace {

using Clock = std::chrono::steady_clock;

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char s[32];
  if (u == 0)
    std::snprintf(s, sizeof(s), "%llu B", static_cast<unsigned long long>(n));
  else
    std::snprintf(s, sizeof(s), "%.1f %s", v, units[u]);
  return s;
}

std::string sizes_text(const std::vector<int64_t>& sizes) {
  std::string s = "[";
  for (size_t i = 0; i < sizes.size(); ++i) s += (i ? ", " : "") + std::to_string(sizes[i]);
  return s + "]";
}

std::string column_text(const data::Column& c) {
  std::string s = data::column_type_name(c.type);
  if (c.type == data::ColumnType::Tensor) {
    s += std::string(" ") + dtype_name(c.dtype) + " " +
         (c.any_rank ? "any shape" : sizes_text(c.shape));
  }
  return s;
}

// A short, printable rendering of one value.
std::string value_text(const data::SampleView& v, const data::Column& c, size_t col) {
  switch (c.type) {
    case data::ColumnType::Int:
      return std::to_string(v.integer(col));
    case data::ColumnType::Bytes:
      return "bytes[" + std::to_string(v.bytes(col).size()) + "]";
    case data::ColumnType::Tensor: {
      auto t = v.tensor(col);
      return std::string(dtype_name(t.dtype)) + " " + sizes_text(t.sizes);
    }
    case data::ColumnType::String: {
      std::string_view b = v.bytes(col);
      std::string s = "\"";
      for (size_t i = 0; i < b.size() && i < 48; ++i) {
        const unsigned char ch = static_cast<unsigned char>(b[i]);
        if (ch == '"' || ch == '\\') {
          s += '\\';
          s += static_cast<char>(ch);
        } else if (ch < 0x20 || ch == 0x7f) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\x%02x", ch);
          s += esc;
        } else {
          s += static_cast<char>(ch);
        }
      }
      s += b.size() > 48 ? "\"..." : "\"";
      return s;
    }
  }
  return "?";
}

struct VerifyProgress {
  bool tty = false;
  Clock::time_point last{};
  bool drawn = false;
};

void draw_progress(uint64_t done, uint64_t total, void* ctx) {
  auto& p = *static_cast<VerifyProgress*>(ctx);
  if (!p.tty) return;
  const auto now = Clock::now();
  if (now - p.last < std::chrono::milliseconds(100) && done < total) return;
  p.last = now;
  constexpr int kWidth = 30;
  const double fraction = total > 0 ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  std::string bar(kWidth, ' ');
  const int filled = static_cast<int>(fraction * kWidth);
  for (int i = 0; i < filled && i < kWidth; ++i) bar[i] = '=';
  if (filled < kWidth) bar[filled] = '>';
  std::printf("\rverifying [%s] %3.0f%% %s of %s   ", bar.c_str(), fraction * 100,
              human_bytes(done).c_str(), human_bytes(total).c_str());
  std::fflush(stdout);
  p.drawn = true;
}

void usage() {
  std::printf(
      "usage: loom data inspect DIR [--no-verify] [--show N]\n"
      "  Prints a shard dataset's index: samples, shards, columns, sizes and hashes. Then checks\n"
      "  every shard's whole-file CRC32C and every sample's CRC32C (skip with --no-verify).\n"
      "  --show N  print the first N samples' values\n");
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "no-verify"}, {"show"});
  if (args.flag("help")) {
    usage();
    return 0;
  }
  LOOM_CHECK(args.positionals().size() == 1,
             "[loom data inspect] expected one dataset directory but got ",
             args.positionals().size(), " arguments; see `loom data inspect --help`");
  const int64_t show = args.get_int("show", 0, 0);
  LOOM_CHECK(show >= 0, "[loom data inspect] --show must be >= 0 but got ", show);

  data::ShardReader reader(args.positionals()[0]);
  const data::Schema& schema = reader.schema();
  uint64_t total_bytes = 0;
  for (const auto& s : reader.shards()) total_bytes += s.bytes;
  const Json* source = reader.index().find("source");

  std::printf("dataset:        %s\n", reader.dir().c_str());
  std::printf("format:         loom-shards version %u\n", data::kShardVersion);
  if (source != nullptr && source->is_string() && !source->as_string().empty())
    std::printf("source:         %s\n", source->as_string().c_str());
  std::printf("samples:        %lld\n", static_cast<long long>(reader.size()));
  std::printf("shards:         %zu\n", reader.shards().size());
  std::printf("total bytes:    %llu (%s)\n", static_cast<unsigned long long>(total_bytes),
              human_bytes(total_bytes).c_str());
  std::printf("compression:    %s\n", reader.compressed() ? "zstd" : "none");
  std::printf("columns:\n");
  for (const auto& c : schema.columns)
    std::printf("  %-16s %s\n", c.name.c_str(), column_text(c).c_str());
  std::printf("shard files:\n");
  for (const auto& s : reader.shards()) {
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08x", s.crc32c);
    std::printf("  %-18s %8lld samples %12llu bytes  crc32c %s\n", s.file.c_str(),
                static_cast<long long>(s.samples), static_cast<unsigned long long>(s.bytes), crc);
  }
  // The tables hold each record's stored size (loading them also checks their CRCs).
  uint64_t stored = 0;
  for (int64_t i = 0; i < reader.size(); ++i) stored += reader.locate(i).bytes;
  if (reader.size() > 0)
    std::printf("average stored bytes per sample: %.1f\n",
                static_cast<double>(stored) / static_cast<double>(reader.size()));
  std::fflush(stdout);

  if (show > 0) {
    std::string buffer, scratch;
    for (int64_t i = 0; i < std::min<int64_t>(show, reader.size()); ++i) {
      data::SampleView v = reader.read(i, buffer, scratch);
      std::string line = "sample " + std::to_string(i) + ":";
      for (size_t c = 0; c < schema.columns.size(); ++c)
        line += " " + schema.columns[c].name + "=" + value_text(v, schema.columns[c], c);
      std::printf("%s\n", line.c_str());
    }
    std::fflush(stdout);
  }

  if (args.flag("no-verify")) return 0;
  VerifyProgress progress;
  progress.tty = isatty(STDOUT_FILENO) == 1;
  if (!progress.tty) {
    std::printf("verifying %zu shards (%s)...\n", reader.shards().size(),
                human_bytes(total_bytes).c_str());
    std::fflush(stdout);
  }
  try {
    reader.verify(draw_progress, &progress);
  } catch (...) {
    if (progress.drawn) std::printf("\n");
    std::fflush(stdout);
    throw;
  }
  if (progress.drawn) std::printf("\n");
  std::printf("verified: %zu shards, %lld samples, all CRC32C match\n", reader.shards().size(),
              static_cast<long long>(reader.size()));
  return 0;
}

const RegisterCommand kInspect("data inspect",
                               "print a shard dataset's contents and verify its hashes", run);

}  // namespace
}  // namespace loom::cli
