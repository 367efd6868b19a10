// TCPStoreServer: the requests and the waiters parked on missing keys (Note [TCP store server
// loop] in tcp_store_server.cpp). Loop thread only.
#include <algorithm>
#include <string>

#include "distributed/store/store_detail.h"
#include "distributed/store/tcp_store_server_impl.h"
#include "loom/error.h"

namespace loom::dist {
namespace {

using proto::Op;
using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxWaitMs = int64_t{1} << 40;  // clamp for client-sent timeouts

bool token_equal(const std::string& a, const std::string& b) {
  // Constant time in the length of the expected token.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < b.size(); ++i) {
    diff |= static_cast<unsigned char>((i < a.size() ? a[i] : 0) ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

bool TCPStoreServer::Impl::handle(Client& c, proto::Frame& f) {
  const uint64_t id = c.id;
  auto& fields = f.fields;
  if (!c.authed) {
    if (f.op != Op::Hello || fields.size() != 1 || !token_equal(fields[0], token)) {
      reject(id, f.op == Op::Hello ? "wrong token" : "no token (first frame is not hello)", true);
      return false;
    }
    c.authed = true;
    reply(c, Op::Ok, {});
    return clients.count(id) > 0;
  }
  auto bad = [&](const char* expected) {
    reject(id,
           std::string(proto::op_name(f.op)) + " frame has " + std::to_string(fields.size()) +
               " fields, expected " + expected,
           false);
    return false;
  };
  auto bad_int = [&](size_t index, const char* what) {
    reject(id,
           std::string(proto::op_name(f.op)) + " frame: field " + std::to_string(index) + " (" +
               what + ") has " + std::to_string(fields[index].size()) + " bytes, expected 8",
           false);
    return false;
  };
  int64_t num = 0;
  switch (f.op) {
    case Op::Hello:
      if (fields.size() != 1) return bad("1 (token)");
      reply(c, Op::Ok, {});
      break;
    case Op::Ping:
      reply(c, Op::Ok, {});
      break;
    case Op::Set:
      if (fields.size() != 2) return bad("2 (key, value)");
      set_key(fields[0], std::move(fields[1]));
      reply(c, Op::Ok, {});
      break;
    case Op::Get:
    case Op::Wait:
    case Op::MultiGet: {
      if (fields.size() < 2 || (f.op == Op::Get && fields.size() != 2)) {
        return bad(f.op == Op::Get ? "2 (timeout, key)" : "at least 2 (timeout, keys)");
      }
      if (!proto::decode_int(fields[0], &num)) return bad_int(0, "timeout");
      std::vector<std::string> keys(std::make_move_iterator(fields.begin() + 1),
                                    std::make_move_iterator(fields.end()));
      bool all = true;
      for (const auto& k : keys) all = all && kv.count(k);
      if (all) {
        answer(c, f.op, keys, false);
      } else {
        park(c, f.op, std::move(keys), num);
      }
      break;
    }
    case Op::Add: {
      if (fields.size() != 2) return bad("2 (key, delta)");
      if (!proto::decode_int(fields[1], &num)) return bad_int(1, "delta");
      auto it = kv.find(fields[0]);
      int64_t v = num;
      try {
        if (it != kv.end()) v += detail::parse_counter(fields[0], it->second);
      } catch (const Error& e) {
        reply(c, Op::Error, {e.what()});
        break;
      }
      set_key(fields[0], std::to_string(v));
      reply(c, Op::Int, {proto::encode_int(v)});
      break;
    }
    case Op::CompareSet: {
      if (fields.size() != 3) return bad("3 (key, expected, desired)");
      auto it = kv.find(fields[0]);
      if (it == kv.end() ? fields[1].empty() : it->second == fields[1]) {
        set_key(fields[0], fields[2]);
        reply(c, Op::Value, {fields[2]});
      } else {
        reply(c, Op::Value, {it == kv.end() ? fields[1] : it->second});
      }
      break;
    }
    case Op::Check: {
      bool all = true;
      for (const auto& k : fields) all = all && kv.count(k);
      reply(c, Op::Bool, {std::string_view(all ? "\x01" : "\0", 1)});
      break;
    }
    case Op::Delete: {
      if (fields.size() != 1) return bad("1 (key)");
      const bool existed = kv.erase(fields[0]) > 0;
      n_keys = static_cast<int64_t>(kv.size());
      reply(c, Op::Bool, {std::string_view(existed ? "\x01" : "\0", 1)});
      break;
    }
    case Op::NumKeys:
      reply(c, Op::Int, {proto::encode_int(static_cast<int64_t>(kv.size()))});
      break;
    case Op::MultiSet:
      if (fields.size() % 2 != 0) return bad("an even number (key, value pairs)");
      for (size_t i = 0; i < fields.size(); i += 2) set_key(fields[i], std::move(fields[i + 1]));
      reply(c, Op::Ok, {});
      break;
    default:
      reject(id, std::string("unexpected opcode '") + proto::op_name(f.op) + "' from a client",
             false);
      return false;
  }
  return clients.count(id) > 0;
}

void TCPStoreServer::Impl::set_key(const std::string& key, std::string value) {
  kv[key] = std::move(value);
  n_keys = static_cast<int64_t>(kv.size());
  notify(key);
}

void TCPStoreServer::Impl::answer(Client& c, Op op, const std::vector<std::string>& keys,
                                  bool timed_out) {
  std::vector<std::string_view> out;
  if (timed_out) {
    for (const auto& k : keys) {
      if (!kv.count(k)) out.emplace_back(k);
    }
    reply(c, Op::Timeout, out);
  } else if (op == Op::Wait) {
    reply(c, Op::Ok, {});
  } else {
    for (const auto& k : keys) out.emplace_back(kv.at(k));
    reply(c, Op::Value, out);
  }
}

void TCPStoreServer::Impl::park(Client& c, Op op, std::vector<std::string> keys,
                                int64_t timeout_ms) {
  const uint64_t wid = next_id++;
  Waiter& w = waiters[wid];
  w.client = c.id;
  w.op = op;
  w.keys = std::move(keys);
  w.deadline =
      Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, kMaxWaitMs));
  for (const auto& k : w.keys) {
    if (!kv.count(k)) {
      w.registered_key = k;
      break;
    }
  }
  waiters_by_key[w.registered_key].push_back(wid);
  deadlines.emplace(w.deadline, wid);
  c.parked = wid;
}

void TCPStoreServer::Impl::unregister(uint64_t wid, const Waiter& w) {
  deadlines.erase({w.deadline, wid});
  auto it = waiters_by_key.find(w.registered_key);
  if (it == waiters_by_key.end()) return;
  auto& v = it->second;
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] == wid) {
      v[i] = v.back();
      v.pop_back();
      break;
    }
  }
  if (v.empty()) waiters_by_key.erase(it);
}

void TCPStoreServer::Impl::notify(const std::string& key) {
  auto it = waiters_by_key.find(key);
  if (it == waiters_by_key.end()) return;
  std::vector<uint64_t> ids = std::move(it->second);
  waiters_by_key.erase(it);
  for (uint64_t wid : ids) {
    auto w = waiters.find(wid);
    if (w == waiters.end()) continue;
    w->second.registered_key.clear();
    for (const auto& k : w->second.keys) {
      if (!kv.count(k)) {
        w->second.registered_key = k;
        break;
      }
    }
    if (w->second.registered_key.empty()) {
      finish_waiter(wid, false);
    } else {
      waiters_by_key[w->second.registered_key].push_back(wid);
    }
  }
}

void TCPStoreServer::Impl::finish_waiter(uint64_t wid, bool timed_out) {
  auto it = waiters.find(wid);
  if (it == waiters.end()) return;
  Waiter w = std::move(it->second);
  waiters.erase(it);
  if (timed_out) {
    unregister(wid, w);
  } else {
    deadlines.erase({w.deadline, wid});
  }
  auto c = clients.find(w.client);
  if (c == clients.end()) return;
  c->second.parked = 0;
  answer(c->second, w.op, w.keys, timed_out);
  resume.push_back(w.client);
}

}  // namespace loom::dist
