#include "loom/generator.h"

namespace loom {

std::array<uint32_t, 4> philox4x32(uint64_t counter_lo, uint64_t counter_hi, uint64_t key) {
  // Constants from Salmon et al., "Parallel random numbers: as easy as 1, 2, 3" (SC'11).
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0 = static_cast<uint32_t>(counter_lo), c1 = static_cast<uint32_t>(counter_lo >> 32);
  uint32_t c2 = static_cast<uint32_t>(counter_hi), c3 = static_cast<uint32_t>(counter_hi >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = static_cast<uint64_t>(kMul0) * c0;
    uint64_t p1 = static_cast<uint64_t>(kMul1) * c2;
    uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    uint32_t n0 = hi1 ^ c1 ^ k0;
    uint32_t n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return {c0, c1, c2, c3};
}

Generator::Generator(uint64_t seed) : impl_(std::make_shared<Impl>()) {
  impl_->st.seed = seed;
}

void Generator::manual_seed(uint64_t seed) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->st = GeneratorState{seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->st.seed;
}

GeneratorState Generator::state() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->st;
}

void Generator::set_state(const GeneratorState& s) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->st = s;
}

GeneratorState Generator::reserve(uint64_t n) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  GeneratorState before = impl_->st;
  impl_->st.offset += (n + 3) / 4;
  return before;
}

Generator& default_generator() {
  static Generator* g = new Generator();
  return *g;
}

void manual_seed(uint64_t seed) {
  default_generator().manual_seed(seed);
}

}  // namespace loom
