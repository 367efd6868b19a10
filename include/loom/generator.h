// Random numbers (core layer): a counter-based Philox4x32-10 generator.
//
// The state is just (seed, offset): the i-th 32-bit draw of a request is Philox(key = seed,
// counter = offset + i / 4) lane i % 4, and a request of n values advances the offset by ceil(n /
// 4). So any element can be computed independently (parallel and GPU friendly), and saving or
// restoring the state is copying two integers. A Generator is a shared handle; its methods lock, so
// one generator may be used from several threads (each request is atomic).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

#include "loom/export.h"

namespace loom {

// One Philox4x32 block with 10 rounds: the 4 outputs for a 128-bit counter and a 64-bit key.
LOOM_API std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key);

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // in units of 128-bit Philox blocks
  bool operator==(const GeneratorState& o) const { return seed == o.seed && offset == o.offset; }
};

class LOOM_API Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull);

  // A Generator is a handle: copies share one state, and const methods may advance it.
  void manual_seed(uint64_t seed) const;
  uint64_t seed() const;
  GeneratorState state() const;
  void set_state(const GeneratorState& s) const;

  // Reserves `n` 32-bit values: returns the state to draw them from (offset before the request) and
  // advances this generator past them.
  GeneratorState reserve(uint64_t n) const;

 private:
  struct Impl {
    mutable std::mutex mu;
    GeneratorState st;  // GUARDED_BY(mu)
  };
  std::shared_ptr<Impl> impl_;
};

// The process-wide default CPU generator (seeded with a fixed value unless manual_seed is called).
LOOM_API Generator& default_generator();
// Seeds the default generator (torch.manual_seed).
LOOM_API void manual_seed(uint64_t seed);

// Stateless draws from a reserved state, for kernels: the i-th uint32 of the reservation.
inline uint32_t philox_draw(const GeneratorState& s, uint64_t i) {
  auto block = philox4x32(s.offset + i / 4, 0, s.seed);
  return block[i % 4];
}
// Uniform float in [0, 1) from a 32-bit draw (24 random bits), and double from two draws (53 bits).
inline float uint32_to_unit_float(uint32_t x) {
  return static_cast<float>(x >> 8) * (1.0f / 16777216.0f);
}
inline double uint64_to_unit_double(uint64_t x) {
  return static_cast<double>(x >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace loom
