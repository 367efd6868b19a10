// `loom data order`: the global sample ids one rank reads in one epoch, in the order it reads them
// (see loom/data/order.h). Batches are produced worker by worker, as loom's loader hands rank-local
// batch j to worker j % K, and merged back in batch order, which shows that K does not change what
// a rank sees.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "loom/data/order.h"
#include "loom/data/shard.h"
#include "loom/error.h"

namespace loom::cli {
namespace {

constexpr const char* kUsage =
    "usage: loom data order (--data DIR | --samples N [--shard-samples S]) [--seed S] [--epoch E]\n"
    "                       [--world W] [--rank R] [--workers K] [--batch B] [--resume-from N]\n"
    "                       [--shuffle block|global|none] [--block-size N] [--pad pad|drop]\n"
    "                       [--limit N] [--by-worker]\n"
    "  Prints the global sample ids rank R of W reads in epoch E, one per line, starting at "
    "global\n"
    "  position N (the resume point: samples consumed, default 0). Shard sizes come from the\n"
    "  dataset's index (--data) or from --samples split into shards of --shard-samples (default "
    "one\n"
    "  shard). --workers K --batch B walk the rank's batches of B as K loader workers would "
    "(batch\n"
    "  j on worker j % K) and merge them back in batch order: the output is the same for any K.\n"
    "  --by-worker adds a column naming the worker. Defaults: seed 0, epoch 0, world 1, rank 0,\n"
    "  workers 1, batch 1, block shuffle of 262144 samples, pad.\n";

int64_t positive(const Args& args, const std::string& name, int64_t fallback, int64_t least) {
  return args.get_int(name, fallback, least);
}

std::vector<int64_t> shard_sizes(const Args& args) {
  const auto data = args.get("data");
  const auto samples = args.get("samples");
  LOOM_CHECK(data.has_value() != samples.has_value(),
             "[loom data order] give exactly one of --data DIR and --samples N");
  std::vector<int64_t> sizes;
  if (data) {
    LOOM_CHECK(!args.get("shard-samples"),
               "[loom data order] --shard-samples goes with --samples, not --data");
    const data::ShardReader reader(*data);
    for (const auto& shard : reader.shards()) sizes.push_back(shard.samples);
    return sizes;
  }
  const int64_t n = positive(args, "samples", 0, 0);
  const int64_t per_shard = positive(args, "shard-samples", n > 0 ? n : 1, 1);
  for (int64_t first = 0; first < n; first += per_shard)
    sizes.push_back(std::min(per_shard, n - first));
  return sizes;
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "by-worker"},
            {"data", "samples", "shard-samples", "seed", "epoch", "world", "rank", "workers",
             "batch", "resume-from", "shuffle", "block-size", "pad", "limit"});
  if (args.flag("help")) {
    std::printf("%s", kUsage);
    return 0;
  }
  LOOM_CHECK(args.positionals().empty(), "[loom data order] unexpected argument '",
             args.positionals().empty() ? "" : args.positionals().front(), "'");

  data::OrderOptions opt;
  const int64_t seed = args.get_int("seed", 0, 0);
  opt.seed = static_cast<uint64_t>(seed);
  try {
    opt.shuffle = data::parse_shuffle_mode(args.get_or("shuffle", "block"));
  } catch (const ValueError& e) {
    LOOM_THROW(ValueError, "[loom data order] --shuffle: ", e.what());
  }
  opt.block_size = positive(args, "block-size", opt.block_size, 1);
  try {
    opt.pad = data::parse_pad_policy(args.get_or("pad", "pad"));
  } catch (const ValueError& e) {
    LOOM_THROW(ValueError, "[loom data order] --pad: ", e.what());
  }
  const int64_t epoch = positive(args, "epoch", 0, 0);
  const int64_t world = args.get_int("world", 1, 1, std::numeric_limits<int>::max());
  const int64_t rank = positive(args, "rank", 0, 0);
  LOOM_CHECK(rank < world, "[loom data order] --rank ", rank, " must be in [0, ", world,
             ") for --world ", world);
  const int64_t workers = args.get_int("workers", 1, 1, 65536);
  const int64_t batch = positive(args, "batch", 1, 1);
  const int64_t start = positive(args, "resume-from", 0, 0);
  const int64_t limit = args.get("limit") ? positive(args, "limit", 0, 0) : -1;
  const bool by_worker = args.flag("by-worker");

  const data::SampleOrder order(shard_sizes(args), opt);
  const int w = static_cast<int>(world), r = static_cast<int>(rank);
  const int64_t epoch_positions = order.epoch_size(w);
  LOOM_CHECK(start <= epoch_positions, "[loom data order] --resume-from ", start,
             " is past the end of the epoch: ", epoch_positions, " positions for --world ", world,
             " (", order.describe(), ")");
  int64_t count = order.rank_size(w, r, start);
  if (limit >= 0) count = std::min(count, limit);

  // Rounds of K batches: worker k fills rank-local batch round*K + k, then the consumer takes the
  // round's batches in batch order. Memory stays O(K * B) however long the epoch.
  const int64_t batches = (count + batch - 1) / batch;
  std::vector<std::vector<int64_t>> produced(static_cast<size_t>(workers));
  for (int64_t round_first = 0; round_first < batches; round_first += workers) {
    for (int64_t k = 0; k < workers; ++k) {
      auto& out = produced[static_cast<size_t>(k)];
      out.clear();
      const int64_t j = round_first + k;
      if (j >= batches) continue;
      const int64_t first_item = j * batch;
      out.resize(static_cast<size_t>(std::min(batch, count - first_item)));
      // Rank-local item i is global position start + rank + i * world.
      order.fill(epoch, start + rank + first_item * world, world, static_cast<int64_t>(out.size()),
                 out.data());
    }
    for (int64_t j = round_first; j < std::min(batches, round_first + workers); ++j) {
      const int64_t k = j % workers;
      for (const int64_t id : produced[static_cast<size_t>(k)]) {
        if (by_worker) {
          std::printf("%lld worker %lld\n", static_cast<long long>(id), static_cast<long long>(k));
        } else {
          std::printf("%lld\n", static_cast<long long>(id));
        }
      }
    }
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}

const RegisterCommand kOrder("data order", "print the global sample ids a rank reads, in order",
                             run);

}  // namespace
}  // namespace loom::cli
