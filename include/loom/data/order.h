// Sample order (data layer): which sample comes at which position of an epoch, and which positions
// each rank reads.
//
// The global order of epoch e is a pure function of (seed, e, position): it does not depend on the
// number of ranks or loader workers. Ranks partition positions by interleaving (rank r of W reads
// positions r, r + W, r + 2W, ...), so with a global batch of B samples (B a multiple of W) step s
// covers positions [sB, sB + B) on all ranks together, whatever W is. Resuming after `consumed`
// positions with another W continues the same global sequence.
//
// Note [block shuffle] (after MosaicML Streaming's py1b): each epoch permutes the shards, lays
// their samples end to end in that order, cuts that sequence into blocks of `block_size` samples
// and permutes each block with a keyed bijection (a Feistel network with cycle walking). A reader
// therefore touches at most about block_size / samples_per_shard + 1 shards at a time, and the
// state is the shard permutation and its prefix sums: memory O(shards), never O(samples). Mode
// Global permutes all samples with one bijection (no locality, O(1) memory); None keeps file order.
//
// Padding: the epoch has `epoch_size(W)` positions. Pad (PyTorch's DistributedSampler default)
// rounds N up to a multiple of W, position p >= N repeating the sample at position p - N (p mod N
// when W > N); Drop rounds down, leaving the last N mod W samples of the order out.
//
// Thread-safety: a SampleOrder is immutable after construction except for an internal cache of the
// last epoch's shard permutation, guarded by a mutex; all methods may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "loom/export.h"

namespace loom::data {

enum class ShuffleMode : uint8_t { None, Block, Global };
enum class PadPolicy : uint8_t { Pad, Drop };
LOOM_API const char* shuffle_mode_name(ShuffleMode m);
LOOM_API const char* pad_policy_name(PadPolicy p);
// ValueError listing the choices for an unknown name.
LOOM_API ShuffleMode parse_shuffle_mode(const std::string& s);
LOOM_API PadPolicy parse_pad_policy(const std::string& s);

struct OrderOptions {
  uint64_t seed = 0;
  ShuffleMode shuffle = ShuffleMode::Block;
  // Samples per shuffle block (Block mode). A power of 4 (like the default) makes full blocks a
  // whole Feistel domain, so no cycle walking is needed (see Bijection).
  int64_t block_size = int64_t{1} << 18;
  PadPolicy pad = PadPolicy::Pad;
};

// A keyed bijection of [0, n): permute(i) for i in [0, n) visits every value exactly once.
class LOOM_API Bijection {
 public:
  Bijection(uint64_t n, uint64_t key);
  uint64_t operator()(uint64_t i) const;  // i < n
  uint64_t size() const { return n_; }

 private:
  uint64_t n_;
  uint64_t key_;
  int half_bits_;
  uint64_t half_mask_;
};

class LOOM_API SampleOrder {
 public:
  // `shard_sizes`: samples in each shard, in index order (global ids run through them in order).
  SampleOrder(std::vector<int64_t> shard_sizes, OrderOptions options);
  ~SampleOrder();

  int64_t samples() const { return total_; }  // N
  const OrderOptions& options() const { return opt_; }

  // Global sample id at `position` of epoch `epoch` (>= 0). Position in [0, N), or any position
  // >= 0 under Pad, where p >= N is a pad position repeating the sample at p mod N. IndexError
  // otherwise (and always when N = 0).
  int64_t at(int64_t epoch, int64_t position) const;
  // Fills out[i] = at(epoch, first + i * stride) for i in [0, count): the batched form the loader
  // uses (one lock, one shard-permutation lookup per run).
  void fill(int64_t epoch, int64_t first, int64_t stride, int64_t count, int64_t* out) const;

  // Positions per epoch for W ranks after the pad policy (a multiple of W).
  int64_t epoch_size(int world) const;
  // Positions rank `rank` of `world` reads in an epoch from global position `start` (a resume
  // point, any value): the k with start + rank + k*W < epoch_size(W).
  int64_t rank_size(int world, int rank, int64_t start = 0) const;
  // Global sample id that rank `rank` reads i-th, counting from `start`: position start + rank +
  // i*W (positions >= N wrap to the start of the order under Pad).
  int64_t rank_at(int64_t epoch, int world, int rank, int64_t i, int64_t start = 0) const;

  // Number of distinct shards the positions [first, first + count) of `epoch` touch (locality
  // audit).
  int64_t shards_touched(int64_t epoch, int64_t first, int64_t count) const;

  // A hash of everything that defines the order (shard sizes, seed, mode, block size, pad policy):
  // what a loader's state_dict records to refuse resuming against a different order.
  uint64_t fingerprint() const;
  std::string describe() const;

 private:
  struct EpochPlan;
  std::shared_ptr<const EpochPlan> plan(int64_t epoch) const;
  int64_t at_with(const EpochPlan& p, int64_t position) const;

  std::vector<int64_t> sizes_;
  std::vector<int64_t> starts_;  // global id of each shard's first sample
  int64_t total_ = 0;
  OrderOptions opt_;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const EpochPlan> cached_;
};

}  // namespace loom::data
