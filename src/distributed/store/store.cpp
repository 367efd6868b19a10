// The Store base (defaults, default_timeout), HashStore and PrefixStore.
#include "loom/distributed/store.h"

#include <cerrno>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "distributed/settings.h"
#include "distributed/store/store_detail.h"
#include "loom/config.h"
#include "loom/error.h"

namespace loom::dist {

// ---- helpers
// --------------------------------------------------------------------------------------

namespace detail {

std::string format_seconds(Duration d) {
  char buf[32];
  const double s = static_cast<double>(d.count()) / 1000.0;
  // One decimal unless that would hide the value (0.25 s stays 0.25 s).
  if (std::fabs(s * 10 - std::round(s * 10)) < 1e-9) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  } else {
    std::snprintf(buf, sizeof(buf), "%.3g s", s);
  }
  return buf;
}

std::string printable(const std::string& bytes, size_t max) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  if (bytes.size() > max) out += "...";
  return out;
}

std::string quote_keys(const std::vector<std::string>& keys) {
  constexpr size_t kShown = 8;
  std::string out;
  for (size_t i = 0; i < keys.size() && i < kShown; ++i) {
    if (i) out += ", ";
    out += '\'';
    out += printable(keys[i]);
    out += '\'';
  }
  if (keys.size() > kShown) out += ", ... (" + std::to_string(keys.size() - kShown) + " more)";
  return out;
}

int64_t parse_counter(const std::string& key, const std::string& value) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value.c_str(), &end, 10);
  LOOM_CHECK(!value.empty() && end == value.c_str() + value.size() && errno == 0, "[store] add('",
             printable(key), "'): the stored value '", printable(value), "' is not an integer");
  return v;
}

void throw_wait_timeout(const char* op, const std::vector<std::string>& keys,
                        const std::vector<std::string>& missing, Duration timeout,
                        const std::string& where) {
  std::string msg = std::string("[store] ") + op + "(" + quote_keys(keys) + ") timed out after " +
                    format_seconds(timeout) + " (" + where + ")";
  if (keys.size() > 1 && !missing.empty()) msg += "; missing keys: " + quote_keys(missing);
  LOOM_THROW(TimeoutError, msg);
}

}  // namespace detail

Duration default_timeout() {
  const double s = settings::kTimeout.get();  // 300 unless set
  return Duration(std::max<int64_t>(1, static_cast<int64_t>(std::llround(s * 1000.0))));
}

// ---- Store
// ----------------------------------------------------------------------------------------

Store::~Store() = default;

std::vector<std::string> Store::multi_get(const std::vector<std::string>& keys) {
  std::vector<std::string> values;
  values.reserve(keys.size());
  for (const auto& k : keys) values.push_back(get(k));
  return values;
}

void Store::multi_set(const std::vector<std::string>& keys,
                      const std::vector<std::string>& values) {
  LOOM_CHECK(keys.size() == values.size(), "[store] multi_set: ", keys.size(), " keys but ",
             values.size(), " values");
  for (size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
}

// ---- HashStore
// ------------------------------------------------------------------------------------

struct HashStore::State {
  std::mutex mu;
  std::condition_variable changed;
  std::unordered_map<std::string, std::string> map;  // GUARDED_BY(mu)
};

HashStore::HashStore() : state_(std::make_unique<State>()) {}
HashStore::~HashStore() = default;

void HashStore::set(const std::string& key, const std::string& value) {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->map[key] = value;
  }
  state_->changed.notify_all();
}

std::string HashStore::get(const std::string& key) {
  std::unique_lock<std::mutex> lock(state_->mu);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto& map = state_->map;
  if (!state_->changed.wait_until(lock, deadline, [&] { return map.count(key) > 0; })) {
    detail::throw_wait_timeout("get", {key}, {key}, timeout_, "HashStore");
  }
  return map.at(key);
}

int64_t HashStore::add(const std::string& key, int64_t delta) {
  int64_t v;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->map.find(key);
    v = (it == state_->map.end() ? 0 : detail::parse_counter(key, it->second)) + delta;
    state_->map[key] = std::to_string(v);
  }
  state_->changed.notify_all();
  return v;
}

std::string HashStore::compare_set(const std::string& key, const std::string& expected,
                                   const std::string& desired) {
  std::string now;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->map.find(key);
    if (it == state_->map.end()) {
      if (!expected.empty()) return expected;  // as torch: nothing stored, expected echoed
      state_->map[key] = desired;
      now = desired;
    } else {
      if (it->second != expected) return it->second;
      it->second = desired;
      now = desired;
    }
  }
  state_->changed.notify_all();
  return now;
}

void HashStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  std::unique_lock<std::mutex> lock(state_->mu);
  auto& map = state_->map;
  auto all = [&] {
    for (const auto& k : keys) {
      if (!map.count(k)) return false;
    }
    return true;
  };
  if (!state_->changed.wait_until(lock, std::chrono::steady_clock::now() + timeout, all)) {
    std::vector<std::string> missing;
    for (const auto& k : keys) {
      if (!map.count(k)) missing.push_back(k);
    }
    detail::throw_wait_timeout("wait", keys, missing, timeout, "HashStore");
  }
}

bool HashStore::check(const std::vector<std::string>& keys) {
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& k : keys) {
    if (!state_->map.count(k)) return false;
  }
  return true;
}

bool HashStore::delete_key(const std::string& key) {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->map.erase(key) > 0;
}

int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<int64_t>(state_->map.size());
}

// ---- PrefixStore
// ----------------------------------------------------------------------------------

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  LOOM_CHECK(base_ != nullptr, "[store] PrefixStore('", prefix_, "') needs a base store");
  timeout_ = base_->timeout();
}

void PrefixStore::set(const std::string& k, const std::string& value) {
  base_->set(key(k), value);
}

std::string PrefixStore::get(const std::string& k) {
  // get() waits with the store's own timeout: honour this one when it was changed from the base's.
  if (timeout_ != base_->timeout()) base_->wait({key(k)}, timeout_);
  return base_->get(key(k));
}

int64_t PrefixStore::add(const std::string& k, int64_t delta) {
  return base_->add(key(k), delta);
}

std::string PrefixStore::compare_set(const std::string& k, const std::string& expected,
                                     const std::string& desired) {
  return base_->compare_set(key(k), expected, desired);
}

namespace {
std::vector<std::string> prefixed(const std::string& prefix, const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& k : keys) out.push_back(prefix + "/" + k);
  return out;
}
}  // namespace

void PrefixStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  base_->wait(prefixed(prefix_, keys), timeout);
}

bool PrefixStore::check(const std::vector<std::string>& keys) {
  return base_->check(prefixed(prefix_, keys));
}

bool PrefixStore::delete_key(const std::string& k) {
  return base_->delete_key(key(k));
}

int64_t PrefixStore::num_keys() {
  return base_->num_keys();
}

std::vector<std::string> PrefixStore::multi_get(const std::vector<std::string>& keys) {
  return base_->multi_get(prefixed(prefix_, keys));
}

void PrefixStore::multi_set(const std::vector<std::string>& keys,
                            const std::vector<std::string>& values) {
  base_->multi_set(prefixed(prefix_, keys), values);
}

}  // namespace loom::dist
