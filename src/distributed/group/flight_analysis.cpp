// `loom dist-debug`: reads the flight records of every rank and explains where the group diverged.
#include <dirent.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "distributed/group/contract.h"
#include "loom/error.h"
#include "loom/json.h"

namespace loom::dist {

namespace {

struct RankRecord {
  int rank = -1;
  int size = 0;
  std::string file;
  std::map<int64_t, Json> by_seq;  // collectives (not point-to-point) by sequence number
};

std::string ranks_text(const std::vector<int>& rs) {
  std::ostringstream os;
  os << (rs.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < rs.size(); ++i) os << (i ? "," : "") << rs[i];
  return os.str();
}

std::string entry_text(const Json& e) {
  return e.at("desc").as_string() + " #" + std::to_string(e.at("seq").as_int());
}

}  // namespace

std::string analyze_flight_records(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  LOOM_CHECK_AS(DataError, d, "[dist-debug] cannot open directory '" + dir + "'");
  std::vector<std::string> files;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.rfind("flight-", 0) == 0 && n.size() > 5 && n.substr(n.size() - 5) == ".json")
      files.push_back(dir + "/" + n);
  }
  ::closedir(d);
  std::sort(files.begin(), files.end());
  LOOM_CHECK_AS(DataError, !files.empty(), "[dist-debug] no flight-*.json files in '" + dir + "'");

  std::map<std::string, std::vector<RankRecord>> groups;
  for (const std::string& path : files) {
    std::ifstream f(path);
    std::string line;
    RankRecord rec;
    rec.file = path;
    std::string group;
    int lineno = 0;
    while (std::getline(f, line)) {
      ++lineno;
      if (line.empty()) continue;
      Json j = Json::parse(line, path + " line " + std::to_string(lineno));
      if (lineno == 1) {
        group = j.at("group").as_string();
        rec.rank = static_cast<int>(j.at("rank").as_int());
        rec.size = static_cast<int>(j.at("size").as_int());
        continue;
      }
      const std::string& op = j.at("op").as_string();
      if (op == "send" || op == "recv") continue;
      rec.by_seq[j.at("seq").as_int()] = j;
    }
    LOOM_CHECK_AS(DataError, rec.rank >= 0, "[dist-debug] " + path + " has no header line");
    groups[group].push_back(std::move(rec));
  }

  std::ostringstream out;
  for (auto& [group, recs] : groups) {
    int size = recs[0].size;
    std::sort(recs.begin(), recs.end(),
              [](const RankRecord& a, const RankRecord& b) { return a.rank < b.rank; });
    out << "group '" << group << "' (" << size << " ranks, records from " << recs.size() << "):\n";
    std::set<int> have;
    for (const auto& r : recs) have.insert(r.rank);
    std::vector<int> silent;
    for (int r = 0; r < size; ++r) {
      if (!have.count(r)) silent.push_back(r);
    }
    // Where each rank stopped.
    for (const auto& r : recs) {
      out << "  rank " << r.rank << ": ";
      if (r.by_seq.empty()) {
        out << "no collectives recorded\n";
        continue;
      }
      const Json& last = r.by_seq.rbegin()->second;
      out << "last " << entry_text(last) << " " << last.at("state").as_string();
      if (const Json* backend = last.find("backend"))
        out << " on the " << backend->as_string() << " backend";
      if (const Json* err = last.find("error"))
        out << " (" << err->as_string().substr(0, 160) << ")";
      out << "\n";
    }
    // The first sequence number that not every rank completed.
    int64_t lo = INT64_MAX, hi = -1;
    for (const auto& r : recs) {
      if (r.by_seq.empty()) continue;
      lo = std::min(lo, r.by_seq.begin()->first);
      hi = std::max(hi, r.by_seq.rbegin()->first);
    }
    bool found = false;
    for (int64_t s = lo; s <= hi && !found && hi >= 0; ++s) {
      std::vector<int> joined, missing, unfinished;
      std::map<std::string, std::vector<int>> descs;
      for (const auto& r : recs) {
        auto it = r.by_seq.find(s);
        if (it == r.by_seq.end()) {
          // A rank whose record starts later simply lost older entries to the ring.
          if (!r.by_seq.empty() && r.by_seq.begin()->first > s) continue;
          missing.push_back(r.rank);
          continue;
        }
        joined.push_back(r.rank);
        descs[it->second.at("desc").as_string()].push_back(r.rank);
        if (it->second.at("state").as_string() != "completed") unfinished.push_back(r.rank);
      }
      if (descs.size() > 1) {
        out << "  MISMATCH at #" << s << ":";
        for (auto& [desc, rs] : descs) out << " " << ranks_text(rs) << " called " << desc << ";";
        out << "\n";
        found = true;
      }
      // Every recorded rank completed it: so did the silent ones (a collective needs everyone).
      if (!missing.empty() || !unfinished.empty()) {
        const Json& e = recs[static_cast<size_t>(0)].by_seq.count(s) ? recs[0].by_seq.at(s)
                                                                     : [&]() -> const Json& {
          for (const auto& r : recs) {
            if (r.by_seq.count(s)) return r.by_seq.at(s);
          }
          return recs[0].by_seq.begin()->second;
        }();
        std::vector<int> absent = missing;
        absent.insert(absent.end(), silent.begin(), silent.end());
        std::sort(absent.begin(), absent.end());
        if (!absent.empty()) {
          out << "  " << ranks_text(absent) << " did not join " << entry_text(e) << "; "
              << ranks_text(joined) << " waited in it";
          if (!silent.empty())
            out << " (" << ranks_text(silent)
                << " wrote no record: hung outside a collective, or killed)";
          out << "\n";
        } else {
          out << "  every rank joined " << entry_text(e) << " but " << ranks_text(unfinished)
              << " did not complete it\n";
        }
        found = true;
      }
    }
    if (!found) out << "  every recorded collective completed on every rank\n";
  }
  return out.str();
}

}  // namespace loom::dist
