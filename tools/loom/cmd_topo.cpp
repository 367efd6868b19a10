// `loom topo`: the machine's topology (Note [Topology] in loom/distributed/topology.h) as a tree,
// JSON or NCCL-shaped XML.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "cli.h"
#include "collectives.h"
#include "job.h"
#include "loom/config.h"
#include "loom/distributed/cost_model.h"
#include "loom/distributed/topology.h"
#include "loom/error.h"
#include "loom/file.h"
#include "loom/parse.h"
#include "loom/text.h"

namespace loom::cli {
namespace {

std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

// "64K" / "1M" / "512" -> bytes; ValueError naming the option otherwise.
size_t parse_bytes(const std::string& text) {
  size_t scale = 1;
  std::string digits = text;
  if (!digits.empty() && (digits.back() == 'K' || digits.back() == 'k')) scale = size_t{1} << 10;
  if (!digits.empty() && (digits.back() == 'M' || digits.back() == 'm')) scale = size_t{1} << 20;
  if (!digits.empty() && (digits.back() == 'G' || digits.back() == 'g')) scale = size_t{1} << 30;
  if (scale != 1) digits.pop_back();
  return static_cast<size_t>(
             parse_int(digits, "[loom topo] --bytes (sizes like 64K,1M)", 0, int64_t{1} << 40)) *
         scale;
}

// Note [Collective cost model]: the constants, then per size every algorithm's best prediction
// (over channels and chunk sizes) and the choice.
int print_predictions(const dist::HostTopology& host, const Args& args) {
  const std::string op_name = *args.get("predict");
  dist::Collective op = dist::Collective::Allreduce;
  bool known = false;
  for (dist::Collective c :
       {dist::Collective::Allreduce, dist::Collective::Allgather, dist::Collective::ReduceScatter,
        dist::Collective::Broadcast, dist::Collective::Reduce, dist::Collective::Alltoall}) {
    if (op_name == dist::collective_name(c)) {
      op = c;
      known = true;
    }
  }
  LOOM_CHECK(known, "[loom topo] --predict ", op_name,
             ": expected allreduce, allgather, reduce_scatter, broadcast, reduce or alltoall");
  const int np = static_cast<int>(args.get_int("np", 4, 1, 4096));
  const int hosts = static_cast<int>(args.get_int("hosts", 1, 1, np));
  const dist::CostModel model = dist::CostModel::load_or_defaults(host);
  const dist::ClusterTopology cluster = dist::synthetic_cluster(host, np, hosts);
  std::vector<size_t> sizes;
  for (const std::string& item : split_commas(args.get_or("bytes", "64K,256K,1M,4M,16M,64M")))
    sizes.push_back(parse_bytes(item));
  std::printf("cost model of %s: %s\n", host.hostname.c_str(), model.source.c_str());
  std::printf("  gamma (reduction) %.3g ns/B\n", model.gamma * 1e9);
  for (dist::LinkClass c :
       {dist::LinkClass::SharedNuma, dist::LinkClass::SharedSocket, dist::LinkClass::CrossSocket,
        dist::LinkClass::LocalTcp, dist::LinkClass::NetworkTcp}) {
    const dist::LinkCost& l = model.link(c);
    std::printf("  %-22s alpha %7.2f us  beta %.3g ns/B (%.2f GB/s a stream)  %s\n",
                dist::link_class_name(c), l.alpha * 1e6, l.beta * 1e9, 1e-9 / l.beta,
                l.source.c_str());
  }
  std::printf("%s on %d rank(s) over %d host(s):\n", dist::collective_name(op), np, hosts);
  for (size_t bytes : sizes) {
    const std::vector<dist::Prediction> all = dist::predict(model, cluster, op, bytes);
    std::printf("  %s\n", format_bytes(bytes).c_str());
    std::vector<std::string> shown;
    for (const dist::Prediction& r : all) {
      if (std::find(shown.begin(), shown.end(), r.algo) != shown.end()) continue;
      shown.push_back(r.algo);
      std::printf("    %s %-8s %10.1f us  (%d channel(s), %s pieces; %s: %s)\n",
                  shown.size() == 1 ? "*" : " ", r.algo.c_str(), r.seconds * 1e6, r.channels,
                  format_bytes(r.chunk_bytes).c_str(), r.link.c_str(), r.formula.c_str());
    }
  }
  std::printf(
      "(* the choice; a, b, g: alpha, beta, gamma; x(b) and x_r(b): a transfer, and one "
      "reduced as it arrives)\n");
  return 0;
}

// The table as a picture: time per size on log-log axes, one colour an algorithm, measured as
// solid lines with dots, predicted dashed; the model's choice marked on the axis under each size.
struct Plot {
  std::string title;
  std::vector<std::string> algos;
  std::vector<int64_t> sizes;
  std::map<std::string, std::vector<double>> measured, predicted;  // microseconds, by size
  std::vector<std::string> choice;                                 // the model's, by size
};

std::string plot_svg(const Plot& p) {
  constexpr double W = 760, H = 460, L = 70, R = 170, T = 40, B = 70;
  double lo = 1e300, hi = 0;
  for (const auto* series : {&p.measured, &p.predicted})
    for (const auto& [a, v] : *series)
      for (double us : v)
        if (us > 0) {
          lo = std::min(lo, us);
          hi = std::max(hi, us);
        }
  if (p.sizes.empty() || hi <= 0) return "<svg xmlns=\"http://www.w3.org/2000/svg\"/>\n";
  const double y0 = std::floor(std::log10(lo)), y1 = std::max(std::ceil(std::log10(hi)), y0 + 1);
  const double x0 = std::log2(static_cast<double>(p.sizes.front()));
  const double x1 = std::max(std::log2(static_cast<double>(p.sizes.back())), x0 + 1);
  auto X = [&](double bytes) { return L + (std::log2(bytes) - x0) / (x1 - x0) * (W - L - R); };
  auto Y = [&](double us) { return H - B - (std::log10(us) - y0) / (y1 - y0) * (H - T - B); };
  static const char* kColours[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                   "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n",
                W, H);
  o += buf;
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  std::snprintf(buf, sizeof(buf), "<text x=\"%.0f\" y=\"22\" font-size=\"15\">", L);
  o += buf + xml_escape(p.title) + " (microseconds; solid measured, dashed predicted)</text>\n";
  for (double e = y0; e <= y1; ++e) {
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n",
                  L, Y(std::pow(10, e)), W - R, Y(std::pow(10, e)), L - 6, Y(std::pow(10, e)) + 4,
                  std::pow(10, e));
    o += buf;
  }
  for (size_t i = 0; i < p.sizes.size(); ++i) {
    const double x = X(static_cast<double>(p.sizes[i]));
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">",
                  x, T * 1.0, x, H - B, x, H - B + 16);
    o += buf + xml_escape(format_bytes(static_cast<double>(p.sizes[i]))) + "</text>";
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" "
                  "fill=\"#555\">",
                  x, H - B + 32);
    o += buf + xml_escape(p.choice[i]) + "</text>\n";
  }
  std::snprintf(buf, sizeof(buf), "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555\">", L, H - B + 50);
  o += buf + std::string("under each size: the model's choice</text>\n");
  for (size_t k = 0; k < p.algos.size(); ++k) {
    const std::string& a = p.algos[k];
    const char* colour = kColours[k % 8];
    for (int predicted = 0; predicted < 2; ++predicted) {
      const std::vector<double>& v = (predicted ? p.predicted : p.measured).at(a);
      std::string pts;
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] <= 0) continue;
        std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", X(static_cast<double>(p.sizes[i])), Y(v[i]));
        pts += buf;
        if (!predicted) {
          std::snprintf(buf, sizeof(buf),
                        "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"%s\"/>\n",
                        X(static_cast<double>(p.sizes[i])), Y(v[i]), colour);
          o += buf;
        }
      }
      o += "<polyline fill=\"none\" stroke=\"" + std::string(colour) + "\" stroke-width=\"1.5\"" +
           (predicted ? " stroke-dasharray=\"5,4\"" : "") + " points=\"" + pts + "\"/>\n";
    }
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" "
                  "stroke-width=\"3\"/><text x=\"%.0f\" y=\"%.0f\">",
                  W - R + 15, T + 18.0 * k + 10, W - R + 40, T + 18.0 * k + 10, colour, W - R + 46,
                  T + 18.0 * k + 14);
    o += buf + xml_escape(a) + "</text>\n";
  }
  return o + "</svg>\n";
}

// Note [Predicted and measured]: `loom topo --table` runs the allreduce sweep of `loom bench
// collectives` (collective_sweep.h: the slowest rank's time, the median over blocks) once per
// algorithm with every algorithm forced, plus the size thresholds (auto) and the model, on N
// ranks of this host; then prints, per size, every algorithm's measured and predicted time, the
// fastest measured, each policy's choice and its regret (its measured time over the fastest, - 1),
// and at the end each algorithm's median prediction error, the policies' median and worst regret,
// and the sizes where the fastest algorithm changes (measured) and where the model's choice does.
int print_table(const dist::HostTopology& host, const Args& args) {
  const int np = static_cast<int>(args.get_int("np", 2, 2, 64));
  const int hosts = static_cast<int>(args.get_int("hosts", 1, 1, np));
  // Emulated hosts: rank r on host r / per (as synthetic_cluster places them), each with its own
  // LOOM_HOST_ID on this machine, so ranks of two hosts talk over TCP and the model sees TCP on
  // one machine between them (HostTopology::machine).
  const int per = (np + hosts - 1) / hosts;
  auto host_name = [&](int h) { return host.machine() + "/emulated-" + std::to_string(h); };
  bench::coll::SweepOptions o;
  o.op = bench::coll::Op::kAllreduce;
  o.np = np;
  o.min_bytes = 64 << 10;
  o.max_bytes = 64 << 20;
  if (auto b = args.get("sizes")) {
    const std::string err = bench::coll::parse_sizes(*b, &o);
    LOOM_CHECK(err.empty(), "[loom topo] ", err);
  }
  o.repeats = static_cast<int>(args.get_int("repeats", 5, 1, 100));
  std::vector<std::string> algos = {"ring", "rhd", "tree", "dbt", "oneshot"};
  if (hosts > 1) {
    for (const char* a : {"hier", "hier_tree"}) algos.push_back(a);
  }
  const std::vector<std::string> policies = {"auto", "model"};
  std::string tmp = (std::filesystem::temp_directory_path() / "loom-topo-XXXXXX").string();
  LOOM_CHECK(::mkdtemp(tmp.data()) != nullptr, "[loom topo] mkdtemp failed");
  // samples[config][bytes]: microseconds, one a round; measured: their medians
  std::map<std::string, std::map<int64_t, std::vector<double>>> samples;
  std::map<std::string, std::map<int64_t, double>> measured;
  int round = 0;
  std::vector<std::string> configs = algos;
  configs.insert(configs.end(), policies.begin(), policies.end());
  const int rounds = static_cast<int>(args.get_int("rounds", 3, 1, 100));
  for (int pass = 0; pass < rounds; ++pass)
    for (const std::string& config : configs) {
      bench::LoomRankOptions lo;
      lo.store_path = tmp + "/store-" + std::to_string(round++);
      lo.algo = config;
      std::vector<bench::JobProcess> ranks;
      for (int r = 0; r < np; ++r) {
        const std::string id = hosts > 1 ? host_name(std::min(r / per, hosts - 1)) : "";
        ranks.push_back({"rank " + std::to_string(r), [o, lo, r, id] {
                           if (!id.empty()) config::set("LOOM_HOST_ID", id);
                           return bench::run_loom_rank(o, r, lo);
                         }});
      }
      bench::JobOptions jo;
      jo.deadline_s = 300;
      const bench::JobResult res = bench::run_job(
          ranks, jo,
          [&](size_t, const std::string& line) {
            char cfg[64], algo[64];
            long long bytes = 0, count = 0;
            double us = 0;
            if (std::sscanf(line.c_str(), "result %63s %63s %lld %lld %lf", cfg, algo, &bytes,
                            &count, &us) == 5)
              samples[config][bytes].push_back(us);
          },
          [](size_t, const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); });
      LOOM_CHECK_AS(DistError, res.ok(), "[loom topo] the ", config,
                    " sweep failed: ", res.reason());
      std::fprintf(stderr, "loom topo: round %d, %s measured\n", pass + 1, config.c_str());
    }
  for (auto& [config, by_size] : samples) {
    for (auto& [bytes, v] : by_size) {
      std::sort(v.begin(), v.end());
      measured[config][bytes] = v[v.size() / 2];
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);

  const dist::CostModel model = dist::CostModel::load_or_defaults(host);
  dist::ClusterTopology cluster = dist::synthetic_cluster(host, np, hosts);
  if (hosts > 1) {
    for (int h = 0; h < hosts; ++h) cluster.hosts[static_cast<size_t>(h)].host_id = host_name(h);
  }
  dist::PredictOptions po;
  po.chunks = {512 << 10};
  po.channels = {2};
  std::printf(
      "allreduce on %d ranks of %s%s, measured (the sweep of loom bench collectives) and "
      "predicted (%s), microseconds\n",
      np, host.hostname.c_str(),
      hosts > 1 ? (" as " + std::to_string(hosts) + " emulated hosts (TCP between them)").c_str()
                : "",
      model.source.c_str());
  std::printf("%10s", "size");
  for (const std::string& a : algos) std::printf(" %19s", (a + " meas/pred").c_str());
  std::printf("  %-8s %-16s %-16s\n", "fastest", "auto (regret)", "model (regret)");
  std::map<std::string, std::vector<double>> errors;
  std::vector<double> regret_auto, regret_model;
  std::string last_best, last_choice;
  std::vector<std::string> crossings, model_crossings;
  Plot plot;
  plot.algos = algos;
  for (const auto& [bytes, unused] : measured["ring"]) {
    (void)unused;
    std::map<std::string, double> pred;
    for (const dist::Prediction& p :
         dist::predict(model, cluster, dist::Collective::Allreduce, static_cast<size_t>(bytes), po))
      if (!pred.count(p.algo)) pred[p.algo] = p.seconds * 1e6;
    std::string best;
    std::printf("%10s", format_bytes(static_cast<size_t>(bytes)).c_str());
    for (const std::string& a : algos) {
      // An algorithm the model does not offer here (hier with one rank a host) has no prediction.
      const auto it = pred.find(a);
      const double m = measured[a][bytes], p = it == pred.end() ? 0 : it->second;
      if (m > 0 && (best.empty() || m < measured[best][bytes])) best = a;
      if (m > 0 && p > 0) errors[a].push_back(std::abs(p - m) / m);
      char cell[40];
      if (p > 0) {
        std::snprintf(cell, sizeof(cell), "%.0f/%.0f", m, p);
      } else {
        std::snprintf(cell, sizeof(cell), "%.0f/-", m);
      }
      std::printf(" %19s", cell);
    }
    const double fastest = measured[best][bytes];
    const double ra = measured["auto"][bytes] / fastest - 1;
    const double rm = measured["model"][bytes] / fastest - 1;
    regret_auto.push_back(ra);
    regret_model.push_back(rm);
    std::string choice;
    double choice_us = 1e300;
    for (const auto& [a, us] : pred)
      if (us < choice_us && std::find(algos.begin(), algos.end(), a) != algos.end()) {
        choice = a;
        choice_us = us;
      }
    plot.sizes.push_back(bytes);
    for (const std::string& a : algos) {
      plot.measured[a].push_back(measured[a][bytes]);
      plot.predicted[a].push_back(pred.count(a) ? pred.at(a) : 0.0);
    }
    plot.choice.push_back(choice);
    char ca[32], cm[40];
    std::snprintf(ca, sizeof(ca), "%+.0f %%", 100 * ra);
    std::snprintf(cm, sizeof(cm), "%s %+.0f %%", choice.c_str(), 100 * rm);
    std::printf("  %-8s %-16s %-16s\n", best.c_str(), ca, cm);
    if (!last_best.empty() && best != last_best)
      crossings.push_back(last_best + " -> " + best + " by " +
                          format_bytes(static_cast<size_t>(bytes)));
    if (!last_choice.empty() && choice != last_choice)
      model_crossings.push_back(last_choice + " -> " + choice + " by " +
                                format_bytes(static_cast<size_t>(bytes)));
    last_best = best;
    last_choice = choice;
  }
  auto med = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  auto worst = [](const std::vector<double>& v) {
    return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
  };
  std::printf("median prediction error:");
  for (const std::string& a : algos) {
    if (errors[a].empty()) {
      std::printf(" %s -;", a.c_str());
    } else {
      std::printf(" %s %.0f %%;", a.c_str(), 100 * med(errors[a]));
    }
  }
  std::printf(
      "\nregret against the fastest measured: size thresholds (auto) median %.0f %%, "
      "worst %.0f %%; the model median %.0f %%, worst %.0f %%\n",
      100 * med(regret_auto), 100 * worst(regret_auto), 100 * med(regret_model),
      100 * worst(regret_model));
  std::printf("fastest measured changes: %s\n",
              crossings.empty() ? "never" : [&] {
                std::string s;
                for (const std::string& c : crossings) s += (s.empty() ? "" : "; ") + c;
                return s;
              }().c_str());
  std::string mc;
  for (const std::string& c : model_crossings) mc += (mc.empty() ? "" : "; ") + c;
  std::printf("the model's choice changes: %s\n", mc.empty() ? "never" : mc.c_str());
  if (auto svg = args.get("svg")) {
    plot.title = "allreduce on " + std::to_string(np) + " ranks" +
                 (hosts > 1 ? " (" + std::to_string(hosts) + " emulated hosts)" : "") + " of " +
                 host.hostname;
    io::atomic_write_file(*svg, plot_svg(plot));
    std::printf("plot written to %s\n", svg->c_str());
  }
  return 0;
}

int run_topo(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "json", "xml", "measure", "no-gpus", "table"},
            {"sys-root", "proc-root", "out", "predict", "np", "hosts", "bytes", "sizes", "repeats",
             "rounds", "svg"});
  if (args.flag("help")) {
    std::printf(
        "usage: loom topo [--json | --xml] [--measure] [--no-gpus] [--out FILE]\n"
        "  What this machine is made of, as the collective cost model sees it: sockets, NUMA\n"
        "  nodes (memory, distances), cores and their hardware threads, caches, the PCIe tree\n"
        "  (class, link speed and width, NUMA node, driver), network interfaces (kind, state,\n"
        "  speed, MTU, addresses) and GPUs through NVML (PCIe link, NVLinks and their far ends).\n"
        "  --json       the same as JSON (what ranks exchange through the store)\n"
        "  --xml        an XML document shaped like NCCL's topology dump\n"
        "  --measure    also measure memory bandwidth (streaming copies, all cores and one)\n"
        "  --no-gpus    do not load NVML\n"
        "  --sys-root DIR, --proc-root DIR   read another sysfs/procfs tree (for tests)\n"
        "  --out FILE   write to FILE instead of standard output\n"
        "  --predict OP [--np N] [--hosts H] [--bytes 64K,1M,...]\n"
        "               the cost model's constants (this host's calibration or defaults from its\n"
        "               hardware) and, per size, every algorithm's predicted time for OP\n"
        "               (allreduce, allgather, reduce_scatter, broadcast, reduce, alltoall) on N\n"
        "               ranks spread over H hosts like this one, and the choice\n"
        "  --table [--np N] [--hosts H] [--sizes 64K:64M] [--repeats R] [--rounds K] [--svg F]\n"
        "               measures the allreduce with every algorithm forced, with the size\n"
        "               thresholds and with the model on N ranks of this host (as H emulated\n"
        "               hosts with TCP between them, adding the hierarchical algorithms), prints "
        "each\n"
        "               size's measured (median of K rounds, 3) and predicted times, the fastest,\n"
        "               each policy's regret,\n"
        "               the median prediction errors and where the choices change; --svg F also\n"
        "               draws measured and predicted times per size to F (an SVG page)\n");
    return 0;
  }
  dist::TopologyOptions o;
  o.sys_root = args.get_or("sys-root", "/sys");
  o.proc_root = args.get_or("proc-root", "/proc");
  o.gpus = !args.flag("no-gpus");
  o.measure_bandwidth = args.flag("measure");
  o.network_addresses = !args.get("sys-root").has_value();
  const dist::HostTopology t = dist::detect_topology(o);
  if (args.get("predict")) return print_predictions(t, args);
  if (args.flag("table")) return print_table(t, args);
  const std::string text = args.flag("json")  ? t.to_json().dump(2) + "\n"
                           : args.flag("xml") ? dist::topology_xml(t)
                                              : dist::topology_tree(t);
  if (auto out = args.get("out")) {
    io::atomic_write_file(*out, text);
  } else {
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

const RegisterCommand kTopo("topo",
                            "the machine's topology: CPUs, caches, NUMA, PCIe, network, GPUs",
                            run_topo);

}  // namespace
}  // namespace loom::cli
