// Deterministic, elastic sample order (see loom/data/order.h and its Note [block shuffle]).
#include "loom/data/order.h"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>
#include <sstream>

#include "loom/error.h"

namespace loom::data {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
// Domain separators, so that the shard permutation, block keys and global key of one (seed, epoch)
// are unrelated streams.
constexpr uint64_t kShardStream = 0x5348415244504552ull;   // "SHARDPER"
constexpr uint64_t kBlockKey = 0x424C4F434B4B4559ull;      // "BLOCKKEY"
constexpr uint64_t kGlobalKey = 0x474C4F42414C4B59ull;     // "GLOBALKY"
constexpr uint64_t kBijectionKey = 0x4645495354454C21ull;  // "FEISTEL!"

// MurmurHash3's 64-bit finalizer: a full-avalanche bijective mixer.
inline uint64_t fmix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xFF51AFD7ED558CCDull;
  x ^= x >> 33;
  x *= 0xC4CEB9FE1A85EC53ull;
  x ^= x >> 33;
  return x;
}

// splitmix64's output function of state `x` (the generator adds kGolden to its state per draw).
inline uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t combine(uint64_t h, uint64_t v) {
  return splitmix64(h ^ fmix64(v + kGolden));
}

uint64_t global_key(uint64_t seed, int64_t epoch) {
  return combine(combine(kGlobalKey, seed), static_cast<uint64_t>(epoch));
}

// A splitmix64 stream: state advances by kGolden, each output is the mixed state.
class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    state_ += kGolden;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound), bound >= 1 (Lemire's multiply-and-reject: no modulo bias).
  uint64_t below(uint64_t bound) {
    unsigned __int128 m = static_cast<unsigned __int128>(next()) * bound;
    uint64_t low = static_cast<uint64_t>(m);
    if (low < bound) {
      const uint64_t threshold = (0 - bound) % bound;
      while (low < threshold) {
        m = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(m);
      }
    }
    return static_cast<uint64_t>(m >> 64);
  }

 private:
  uint64_t state_;
};

}  // namespace

const char* shuffle_mode_name(ShuffleMode m) {
  switch (m) {
    case ShuffleMode::None:
      return "none";
    case ShuffleMode::Block:
      return "block";
    case ShuffleMode::Global:
      return "global";
  }
  return "?";
}

const char* pad_policy_name(PadPolicy p) {
  switch (p) {
    case PadPolicy::Pad:
      return "pad";
    case PadPolicy::Drop:
      return "drop";
  }
  return "?";
}

ShuffleMode parse_shuffle_mode(const std::string& s) {
  if (s == "none") return ShuffleMode::None;
  if (s == "block") return ShuffleMode::Block;
  if (s == "global") return ShuffleMode::Global;
  LOOM_THROW(ValueError, "[data.order] unknown shuffle mode '", s,
             "': expected one of block, global, none");
}

PadPolicy parse_pad_policy(const std::string& s) {
  if (s == "pad") return PadPolicy::Pad;
  if (s == "drop") return PadPolicy::Drop;
  LOOM_THROW(ValueError, "[data.order] unknown pad policy '", s, "': expected one of pad, drop");
}

// ---------------------------------------------------------------------------------------------
// Bijection: a balanced Feistel network over 2h bits, cycle-walked down to [0, n).

namespace {
constexpr int kFeistelRounds = 6;
}  // namespace

Bijection::Bijection(uint64_t n, uint64_t key) : n_(n) {
  // Smallest b with 2^b >= n, rounded up to an even number of bits, at least 2.
  const int bits = n <= 1 ? 0 : 64 - std::countl_zero(n - 1);
  half_bits_ = std::max(1, (bits + 1) / 2);
  half_mask_ = half_bits_ >= 64 ? ~uint64_t{0} : (uint64_t{1} << half_bits_) - 1;
  // Mixing n into the key makes bijections of different sizes with one key unrelated.
  key_ = splitmix64(key ^ (n * 0xD6E8FEB86659FD93ull + kBijectionKey));
}

uint64_t Bijection::operator()(uint64_t i) const {
  LOOM_INTERNAL_ASSERT(i < n_, "[data.order] Bijection index ", i, " out of range for size ", n_);
  const int h = half_bits_;
  const uint64_t mask = half_mask_;
  uint64_t x = i;
  // Cycle walking: the Feistel network permutes [0, 2^2h); iterating it from i < n reaches a value
  // < n again before coming back to i, and that first such value defines a bijection of [0, n).
  // 2^2h < 4n, so the expected number of passes is below 4.
  do {
    uint64_t left = x >> h;
    uint64_t right = x & mask;
    for (int r = 0; r < kFeistelRounds; ++r) {
      // Round keys differ in the high bits the half never reaches, so fmix64 sees a fresh key.
      const uint64_t f = fmix64(right ^ (key_ + static_cast<uint64_t>(r + 1) * kGolden));
      const uint64_t next = left ^ (f & mask);
      left = right;
      right = next;
    }
    x = (left << h) | right;
  } while (x >= n_);
  return x;
}

// ---------------------------------------------------------------------------------------------
// SampleOrder

// Note [shard lookup]: mapping a position q of the shuffled-shard concatenation to its shard is a
// search for the last k with prefix[k] <= q (upper_bound skips empty shards, whose prefixes
// repeat). A guide table with one entry per `guide_step` positions (about one per shard) narrows
// the search to the few shards that start inside one step, so a lookup costs O(1) expected instead
// of log(shards) cache misses; it stays O(shards) memory.
struct SampleOrder::EpochPlan {
  int64_t epoch = 0;
  uint64_t epoch_key = 0;       // block b's bijection key is combine(epoch_key, b)
  std::vector<int32_t> shard;   // shard[k]: the k-th shard of this epoch's concatenation
  std::vector<int64_t> prefix;  // prefix[k]: samples before shard[k] in the concatenation; size+1
  int64_t guide_step = 1;
  std::vector<int32_t> guide;  // guide[t] = find(t * guide_step)

  // The k with prefix[k] <= q < prefix[k + 1], knowing lo <= k <= hi.
  size_t find_between(int64_t q, size_t lo, size_t hi) const {
    const auto it = std::upper_bound(prefix.begin() + static_cast<ptrdiff_t>(lo) + 1,
                                     prefix.begin() + static_cast<ptrdiff_t>(hi) + 1, q);
    return static_cast<size_t>(it - prefix.begin()) - 1;
  }
  size_t find(int64_t q) const {
    const size_t t = static_cast<size_t>(q / guide_step);
    const size_t lo = static_cast<size_t>(guide[t]);
    const size_t hi = t + 1 < guide.size() ? static_cast<size_t>(guide[t + 1]) : shard.size() - 1;
    return find_between(q, lo, hi);
  }
};

SampleOrder::SampleOrder(std::vector<int64_t> shard_sizes, OrderOptions options)
    : sizes_(std::move(shard_sizes)), opt_(options) {
  LOOM_CHECK(opt_.shuffle == ShuffleMode::None || opt_.shuffle == ShuffleMode::Block ||
                 opt_.shuffle == ShuffleMode::Global,
             "[data.order] invalid shuffle mode value ", static_cast<int>(opt_.shuffle));
  LOOM_CHECK(opt_.pad == PadPolicy::Pad || opt_.pad == PadPolicy::Drop,
             "[data.order] invalid pad policy value ", static_cast<int>(opt_.pad));
  LOOM_CHECK(opt_.block_size >= 1, "[data.order] block_size must be at least 1 but got ",
             opt_.block_size);
  LOOM_CHECK(sizes_.size() <= static_cast<size_t>(std::numeric_limits<int32_t>::max()),
             "[data.order] too many shards: ", sizes_.size());
  starts_.resize(sizes_.size());
  for (size_t s = 0; s < sizes_.size(); ++s) {
    LOOM_CHECK(sizes_[s] >= 0, "[data.order] shard ", s, " has a negative size ", sizes_[s]);
    LOOM_CHECK(sizes_[s] <= std::numeric_limits<int64_t>::max() / 2 - total_,
               "[data.order] the dataset is too large: the sample count overflows at shard ", s);
    starts_[s] = total_;
    total_ += sizes_[s];
  }
}

SampleOrder::~SampleOrder() = default;

std::shared_ptr<const SampleOrder::EpochPlan> SampleOrder::plan(int64_t epoch) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (cached_ && cached_->epoch == epoch) return cached_;
  auto p = std::make_shared<EpochPlan>();
  p->epoch = epoch;
  const size_t shards = sizes_.size();
  p->shard.resize(shards);
  for (size_t s = 0; s < shards; ++s) p->shard[s] = static_cast<int32_t>(s);
  // Fisher-Yates with a generator of (seed, epoch).
  SplitMix rng(combine(combine(kShardStream, opt_.seed), static_cast<uint64_t>(epoch)));
  for (size_t k = shards; k > 1; --k) {
    const size_t j = static_cast<size_t>(rng.below(k));
    std::swap(p->shard[k - 1], p->shard[j]);
  }
  p->prefix.resize(shards + 1);
  p->prefix[0] = 0;
  for (size_t k = 0; k < shards; ++k) p->prefix[k + 1] = p->prefix[k] + sizes_[p->shard[k]];
  p->epoch_key = combine(combine(kBlockKey, opt_.seed), static_cast<uint64_t>(epoch));
  if (total_ > 0) {  // Note [shard lookup]
    p->guide_step = std::max<int64_t>(
        1, (total_ + static_cast<int64_t>(shards)) / static_cast<int64_t>(shards + 1));
    const int64_t entries = (total_ + p->guide_step - 1) / p->guide_step;
    p->guide.resize(static_cast<size_t>(entries));
    size_t k = 0;
    for (int64_t t = 0; t < entries; ++t) {
      while (p->prefix[k + 1] <= t * p->guide_step) ++k;
      p->guide[static_cast<size_t>(t)] = static_cast<int32_t>(k);
    }
  }
  cached_ = std::move(p);
  return cached_;
}

int64_t SampleOrder::at_with(const EpochPlan& p, int64_t position) const {
  // Block mode only; the caller checked 0 <= position, total_ > 0, and position < total_ or Pad.
  LOOM_INTERNAL_ASSERT(opt_.shuffle == ShuffleMode::Block);
  const int64_t pos = position < total_ ? position : position % total_;
  const int64_t bs = opt_.block_size;
  const int64_t block = pos / bs;
  const int64_t first = block * bs;
  const int64_t length = std::min(bs, total_ - first);
  const Bijection bij(static_cast<uint64_t>(length),
                      combine(p.epoch_key, static_cast<uint64_t>(block)));
  const int64_t q = first + static_cast<int64_t>(bij(static_cast<uint64_t>(pos - first)));
  const size_t k = p.find(q);
  return starts_[static_cast<size_t>(p.shard[k])] + (q - p.prefix[k]);
}

namespace {

// Positions valid in every epoch: [0, N) under Drop; any position >= 0 under Pad (p >= N is a pad
// position, repeating the sample at p mod N).
void check_position(int64_t epoch, int64_t position, int64_t total, PadPolicy pad) {
  LOOM_CHECK(epoch >= 0, "[data.order] epoch must be non-negative but got ", epoch);
  LOOM_CHECK_INDEX(total > 0, "[data.order] position ", position,
                   " is out of range: the dataset has no samples");
  LOOM_CHECK_INDEX(position >= 0 && (position < total || pad == PadPolicy::Pad),
                   "[data.order] position ", position, " is out of range for an epoch of ", total,
                   " samples (", pad_policy_name(pad), ")");
}

}  // namespace

int64_t SampleOrder::at(int64_t epoch, int64_t position) const {
  check_position(epoch, position, total_, opt_.pad);
  switch (opt_.shuffle) {
    case ShuffleMode::None:
      return position % total_;
    case ShuffleMode::Global: {
      const Bijection bij(static_cast<uint64_t>(total_), global_key(opt_.seed, epoch));
      return static_cast<int64_t>(bij(static_cast<uint64_t>(position % total_)));
    }
    case ShuffleMode::Block:
      break;
  }
  return at_with(*plan(epoch), position);
}

void SampleOrder::fill(int64_t epoch, int64_t first, int64_t stride, int64_t count,
                       int64_t* out) const {
  LOOM_CHECK(count >= 0, "[data.order] fill: count must be non-negative but got ", count);
  if (count == 0) return;
  // Positions are monotone in i, so checking both ends checks them all.
  check_position(epoch, first, total_, opt_.pad);
  int64_t span = 0, last = 0;
  LOOM_CHECK(!__builtin_mul_overflow(count - 1, stride, &span) &&
                 !__builtin_add_overflow(first, span, &last),
             "[data.order] fill: ", count, " positions from ", first, " by ", stride,
             " overflow int64");
  check_position(epoch, last, total_, opt_.pad);
  switch (opt_.shuffle) {
    case ShuffleMode::None:
      for (int64_t i = 0; i < count; ++i) {
        const int64_t position = first + i * stride;
        out[i] = position < total_ ? position : position % total_;
      }
      return;
    case ShuffleMode::Global: {
      const Bijection bij(static_cast<uint64_t>(total_), global_key(opt_.seed, epoch));
      for (int64_t i = 0; i < count; ++i)
        out[i] = static_cast<int64_t>(bij(static_cast<uint64_t>((first + i * stride) % total_)));
      return;
    }
    case ShuffleMode::Block:
      break;
  }
  // Runs of positions share a block: build its bijection and find its shards once per block.
  const auto plan_ptr = plan(epoch);
  const EpochPlan& p = *plan_ptr;
  const int64_t bs = opt_.block_size;
  int64_t block_first = 0, block_end = 0;  // the current block's positions: [first, end)
  size_t k_lo = 0, k_hi = 0;
  Bijection bij(0, 0);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t position = first + i * stride;
    const int64_t pos = position < total_ ? position : position % total_;
    if (pos < block_first || pos >= block_end) {  // (no division on the common path)
      const int64_t block = pos / bs;
      block_first = block * bs;
      const int64_t length = std::min(bs, total_ - block_first);
      block_end = block_first + length;
      bij = Bijection(static_cast<uint64_t>(length),
                      combine(p.epoch_key, static_cast<uint64_t>(block)));
      k_lo = p.find(block_first);
      k_hi = p.find(block_first + length - 1);
    }
    const int64_t q =
        block_first + static_cast<int64_t>(bij(static_cast<uint64_t>(pos - block_first)));
    const size_t k = p.find_between(q, k_lo, k_hi);
    out[i] = starts_[static_cast<size_t>(p.shard[k])] + (q - p.prefix[k]);
  }
}

int64_t SampleOrder::epoch_size(int world) const {
  LOOM_CHECK(world >= 1, "[data.order] world size must be at least 1 but got ", world);
  const int64_t w = world;
  return opt_.pad == PadPolicy::Pad ? (total_ + w - 1) / w * w : total_ / w * w;
}

int64_t SampleOrder::rank_size(int world, int rank, int64_t start) const {
  const int64_t end = epoch_size(world);
  LOOM_CHECK(rank >= 0 && rank < world, "[data.order] rank ", rank,
             " is out of range for world size ", world);
  LOOM_CHECK(start >= 0, "[data.order] start position must be non-negative but got ", start);
  const int64_t first = start + rank;
  if (first >= end) return 0;
  return (end - 1 - first) / world + 1;
}

int64_t SampleOrder::rank_at(int64_t epoch, int world, int rank, int64_t i, int64_t start) const {
  const int64_t n = rank_size(world, rank, start);
  LOOM_CHECK_INDEX(i >= 0 && i < n, "[data.order] rank ", rank, " of ", world, " reads ", n,
                   " positions from position ", start, " of an epoch of ", epoch_size(world),
                   " but index ", i, " was asked for");
  return at(epoch, start + rank + i * world);
}

int64_t SampleOrder::shards_touched(int64_t epoch, int64_t first, int64_t count) const {
  LOOM_CHECK(count >= 0, "[data.order] shards_touched: count must be non-negative but got ", count);
  if (count == 0) return 0;
  std::vector<int64_t> ids(static_cast<size_t>(count));
  fill(epoch, first, 1, count, ids.data());
  std::vector<int64_t> shards;
  shards.reserve(ids.size());
  for (const int64_t id : ids) {
    const auto it = std::upper_bound(starts_.begin(), starts_.end(), id);
    shards.push_back(static_cast<int64_t>(it - starts_.begin()) - 1);
  }
  std::sort(shards.begin(), shards.end());
  return static_cast<int64_t>(std::unique(shards.begin(), shards.end()) - shards.begin());
}

uint64_t SampleOrder::fingerprint() const {
  // FNV-1a over the defining values, each as 8 little-endian bytes, then a final mix.
  uint64_t h = 0xCBF29CE484222325ull;
  auto add = [&h](uint64_t v) {
    for (int b = 0; b < 8; ++b) {
      h ^= (v >> (8 * b)) & 0xFF;
      h *= 0x100000001B3ull;
    }
  };
  add(0x6C6F6F6D6F726431ull);  // "loomord1": the order's version
  add(sizes_.size());
  for (const int64_t s : sizes_) add(static_cast<uint64_t>(s));
  add(opt_.seed);
  add(static_cast<uint64_t>(opt_.shuffle));
  add(static_cast<uint64_t>(opt_.block_size));
  add(static_cast<uint64_t>(opt_.pad));
  return fmix64(h);
}

std::string SampleOrder::describe() const {
  const std::string shard_count =
      std::to_string(sizes_.size()) + (sizes_.size() == 1 ? " shard" : " shards");
  std::ostringstream os;
  switch (opt_.shuffle) {
    case ShuffleMode::Block:
      os << "block shuffle (block " << opt_.block_size << " samples, " << shard_count << ", seed "
         << opt_.seed;
      break;
    case ShuffleMode::Global:
      os << "global shuffle (" << total_ << " samples, seed " << opt_.seed;
      break;
    case ShuffleMode::None:
      os << "file order (" << total_ << " samples, " << shard_count;
      break;
  }
  os << ", " << pad_policy_name(opt_.pad) << ")";
  return os.str();
}

}  // namespace loom::data
