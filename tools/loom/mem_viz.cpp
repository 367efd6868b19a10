// `loom mem viz`: the HTML page of a memory snapshot (see mem_viz.h).
//
// Note [memory page]
//   The page's data (timeline series, segments and blocks) travels as a JSON document in a
//   <script type="application/json"> element; a small inline script draws both charts into their
//   <svg> elements with createElementNS and textContent, so no snapshot string is ever parsed as
//   markup. In the JSON, '<', '>', '&' and U+2028/U+2029 are written as \u escapes, which keeps
//   "</script>" and friends from ending the element. The stats table and the header are made here,
//   with every string HTML-escaped.
//
//   The timeline starts from the state before the history's first event: the final allocated and
//   reserved bytes minus the sum of the history's changes (the history is a ring and may have lost
//   its oldest events). Alloc / Free change allocated bytes by the block size, SegmentAlloc /
//   SegmentFree reserved bytes by the segment size. Long histories are reduced to at most
//   kMaxPoints points, each the maximum over its bucket, so peaks survive.
//
//   When the history holds Step events (training steps ended), the x axis is in steps: the events
//   between two step markers spread evenly over that step, those before the first marker over the
//   step it ends, those after the last over at most one more step at the average events per step.
//   Otherwise it is the history's event index. The segment map is drawn twice when the snapshot
//   has the segments at the peak (Snapshot::peak): at the end and at the peak, with buttons to
//   switch; both list the operators holding the most live bytes.
#include "mem_viz.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <string_view>

#include "loom/json.h"
#include "loom/text.h"

namespace loom::cli {
namespace {

using memory::BlockInfo;
using memory::MemoryStats;
using memory::SegmentInfo;
using memory::Snapshot;
using memory::Stat;
using memory::TraceEvent;

constexpr size_t kMaxPoints = 2000;

// JSON text made safe inside a <script> element (Note [memory page]).
std::string script_safe_json(const Json& j) {
  const std::string s = j.dump();
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') {
      o += "\\u003c";
    } else if (c == '>') {
      o += "\\u003e";
    } else if (c == '&') {
      o += "\\u0026";
    } else if (static_cast<unsigned char>(c) == 0xE2 && i + 2 < s.size() &&
               static_cast<unsigned char>(s[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(s[i + 2]) == 0xA8 ||
                static_cast<unsigned char>(s[i + 2]) == 0xA9)) {
      o += static_cast<unsigned char>(s[i + 2]) == 0xA8 ? "\\u2028" : "\\u2029";
      i += 2;
    } else {
      o += c;
    }
  }
  return o;
}

std::string hex(uint64_t a) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, a);
  return buf;
}

// Position on the step axis of history position p (0: before the first event, i: after event i),
// from the Step events' positions and counts (Note [memory page]).
class StepAxis {
 public:
  explicit StepAxis(const Snapshot& s) {
    for (size_t i = 0; i < s.history.size(); ++i) {
      if (s.history[i].kind == TraceEvent::Kind::Step) {
        pos_.push_back(static_cast<double>(i + 1));
        steps_.push_back(static_cast<double>(s.history[i].size));
      }
    }
    if (pos_.size() >= 2 && steps_.back() > steps_.front()) {
      per_step_ = (pos_.back() - pos_.front()) / (steps_.back() - steps_.front());
    } else {
      per_step_ = std::max(1.0, static_cast<double>(s.history.size()));
    }
  }
  bool empty() const { return pos_.empty(); }
  double at(double p) const {
    if (p <= pos_.front()) {
      const double lo = std::max(0.0, steps_.front() - 1);
      return pos_.front() <= 0 ? steps_.front() : lo + (steps_.front() - lo) * p / pos_.front();
    }
    if (p >= pos_.back()) return steps_.back() + std::min(1.0, (p - pos_.back()) / per_step_);
    const size_t j =
        static_cast<size_t>(std::upper_bound(pos_.begin(), pos_.end(), p) - pos_.begin()) - 1;
    const double span = pos_[j + 1] - pos_[j];
    return steps_[j] + (span > 0 ? (p - pos_[j]) / span : 0) * (steps_[j + 1] - steps_[j]);
  }

 private:
  std::vector<double> pos_, steps_;
  double per_step_ = 1;
};

Json timeline(const Snapshot& s) {
  int64_t alloc_delta = 0, reserved_delta = 0;
  auto delta = [](const TraceEvent& e, int64_t* a, int64_t* r) {
    const auto n = static_cast<int64_t>(e.size);
    switch (e.kind) {
      case TraceEvent::Kind::Alloc:
        *a += n;
        break;
      case TraceEvent::Kind::Free:
        *a -= n;
        break;
      case TraceEvent::Kind::SegmentAlloc:
        *r += n;
        break;
      case TraceEvent::Kind::SegmentFree:
        *r -= n;
        break;
      case TraceEvent::Kind::Oom:
      case TraceEvent::Kind::Step:
        break;
    }
  };
  for (const TraceEvent& e : s.history) delta(e, &alloc_delta, &reserved_delta);
  int64_t a = s.stats.allocated_bytes.current - alloc_delta;
  int64_t r = s.stats.reserved_bytes.current - reserved_delta;
  const size_t n = s.history.size() + 1;  // the state before the first event, then after each
  const size_t per_point = (n + kMaxPoints - 1) / kMaxPoints;
  const StepAxis axis(s);
  auto x_of = [&](size_t p) -> Json {
    if (axis.empty()) return Json(static_cast<int64_t>(p));
    return Json(std::round(axis.at(static_cast<double>(p)) * 1e4) / 1e4);
  };
  Json::Array xs, as, rs, ooms, events;
  int64_t bucket_a = a, bucket_r = r;
  size_t in_bucket = 1;
  auto flush = [&](size_t x) {
    xs.push_back(x_of(x));
    events.emplace_back(static_cast<int64_t>(x));
    as.emplace_back(bucket_a);
    rs.emplace_back(bucket_r);
    in_bucket = 0;
  };
  if (per_point == 1) flush(0);
  for (size_t i = 0; i < s.history.size(); ++i) {
    delta(s.history[i], &a, &r);
    if (s.history[i].kind == TraceEvent::Kind::Oom) ooms.push_back(x_of(i + 1));
    bucket_a = in_bucket == 0 ? a : std::max(bucket_a, a);
    bucket_r = in_bucket == 0 ? r : std::max(bucket_r, r);
    if (++in_bucket == per_point || i + 1 == s.history.size()) flush(i + 1);
  }
  return Json::object({{"x", Json(std::move(xs))},
                       {"event", Json(std::move(events))},
                       {"unit", axis.empty() ? "history event" : "training step"},
                       {"allocated", Json(std::move(as))},
                       {"reserved", Json(std::move(rs))},
                       {"ooms", Json(std::move(ooms))}});
}

Json segments_json(const std::vector<SegmentInfo>& segments) {
  Json::Array segs;
  for (const SegmentInfo& seg : segments) {
    Json::Array blocks;
    for (const BlockInfo& b : seg.blocks) {
      const char* state = b.allocated ? "allocated" : b.pending ? "pending" : "free";
      blocks.push_back(Json::array({static_cast<int64_t>(b.address - seg.address), b.size, state,
                                    b.requested, b.stream, b.context, hex(b.address), b.op}));
    }
    Json::Array unmapped;  // expandable segments: runs of pages not mapped (under free blocks)
    for (const auto& [address, size] : seg.unmapped) {
      unmapped.push_back(Json::array({static_cast<int64_t>(address - seg.address), size}));
    }
    segs.push_back(Json::object({{"address", hex(seg.address)},
                                 {"size", seg.size},
                                 {"mapped", seg.mapped_bytes()},
                                 {"pool", seg.small_pool ? "small" : "large"},
                                 {"stream", seg.stream},
                                 {"blocks", Json(std::move(blocks))},
                                 {"unmapped", Json(std::move(unmapped))}}));
  }
  return Json(std::move(segs));
}

void stat_row(std::string& o, const char* name, const Stat& st, bool bytes) {
  auto cell = [&](int64_t v) {
    o += "<td>";
    o += bytes ? xml_escape(format_bytes(static_cast<double>(v))) : std::to_string(v);
    o += "</td>";
  };
  o += "<tr><th>";
  o += name;
  o += "</th>";
  cell(st.current);
  cell(st.peak);
  cell(st.allocated);
  cell(st.freed);
  o += "</tr>\n";
}

// The operators holding the most live bytes, as a table (Note [memory page]).
std::string ops_table(const std::string& id, const std::vector<SegmentInfo>& segments) {
  const std::vector<memory::OpUsage> ops = memory::usage_by_op(segments);
  std::string o =
      "<table class=\"stats ops\" id=\"" + id +
      "\">\n<tr><th>operator</th><th>live bytes</th><th>requested</th><th>blocks</th></tr>\n";
  for (size_t i = 0; i < ops.size() && i < 12; ++i) {
    o += "<tr><th>" + xml_escape(ops[i].op.empty() ? "(outside any operator)" : ops[i].op) +
         "</th><td>" + xml_escape(format_bytes(static_cast<double>(ops[i].bytes))) + "</td><td>" +
         xml_escape(format_bytes(static_cast<double>(ops[i].requested))) + "</td><td>" +
         std::to_string(ops[i].blocks) + "</td></tr>\n";
  }
  if (ops.empty()) o += "<tr><td colspan=\"4\">nothing live</td></tr>\n";
  return o + "</table>\n";
}

std::string stats_table(const MemoryStats& st) {
  std::string o =
      "<table class=\"stats\" id=\"stats\">\n<tr><th>stat</th><th>current</th><th>peak</th>"
      "<th>allocated (sum of increases)</th><th>freed (sum of decreases)</th></tr>\n";
  stat_row(o, "allocated_bytes", st.allocated_bytes, true);
  stat_row(o, "requested_bytes", st.requested_bytes, true);
  stat_row(o, "reserved_bytes", st.reserved_bytes, true);
  stat_row(o, "active_bytes", st.active_bytes, true);
  stat_row(o, "inactive_split_bytes", st.inactive_split_bytes, true);
  stat_row(o, "allocations", st.allocations, false);
  stat_row(o, "segments", st.segments, false);
  o += "</table>\n<table class=\"stats\" id=\"counters\">\n";
  auto row = [&](const char* name, const std::string& value) {
    o += "<tr><th>";
    o += name;
    o += "</th><td>" + xml_escape(value) + "</td></tr>\n";
  };
  char frag[32];
  std::snprintf(frag, sizeof(frag), "%.4f", st.fragmentation());
  row("fragmentation", frag);
  row("largest_free_block", format_bytes(static_cast<double>(st.largest_free_block)));
  row("free_reserved_bytes", format_bytes(static_cast<double>(st.free_reserved_bytes())));
  row("num_device_mallocs", std::to_string(st.num_device_mallocs));
  row("num_device_frees", std::to_string(st.num_device_frees));
  row("num_device_maps", std::to_string(st.num_device_maps));
  row("num_device_unmaps", std::to_string(st.num_device_unmaps));
  row("num_alloc_retries", std::to_string(st.num_alloc_retries));
  row("num_ooms", std::to_string(st.num_ooms));
  o += "</table>\n";
  return o;
}

constexpr const char* kStyle = R"CSS(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; max-width: 1100px; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; }
.meta { color: #555; } .meta code { color: #222; }
svg.chart { display: block; border: 1px solid #ddd; background: #fff; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
.axis line, .axis path { stroke: #888; } .grid line { stroke: #eee; }
.area-reserved { fill: #f2c48d; } .line-reserved { stroke: #d97b0b; fill: none; stroke-width: 1.5; }
.area-allocated { fill: #8cb3dd; } .line-allocated { stroke: #2b62a3; fill: none; stroke-width: 1.5; }
.peak { stroke-dasharray: 4 3; stroke-width: 1; } .oom { stroke: #c00; stroke-width: 1; }
.cursor { stroke: #555; stroke-width: 1; }
.block-allocated { fill: #4c78a8; } .block-free { fill: #e8e8e8; } .block-pending { fill: #f58518; }
.segment-outline { fill: none; stroke: #999; }
.unmapped { fill: #fff; stroke: #bbb; stroke-dasharray: 2 2; }
.legend span.sw { display: inline-block; width: 12px; height: 12px; vertical-align: middle; margin: 0 4px 0 12px; }
table.stats { border-collapse: collapse; margin: 8px 0 16px; }
table.stats th, table.stats td { border: 1px solid #ddd; padding: 3px 10px; text-align: right; }
table.stats th:first-child { text-align: left; }
.step-line { stroke: #e4e4f4; }
#map-choice button { font: inherit; margin-right: 6px; padding: 2px 10px; border: 1px solid #999;
                     background: #fff; border-radius: 3px; cursor: pointer; }
#map-choice button.on { background: #2b62a3; color: #fff; border-color: #2b62a3; }
#tip { position: fixed; pointer-events: none; background: #222; color: #fff; padding: 4px 8px;
       border-radius: 3px; font-size: 12px; white-space: pre; display: none; }
)CSS";

// Draws #timeline and #segments from the JSON in #loom-data (Note [memory page]).
constexpr const char* kScript = R"JS(
(function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var data = JSON.parse(document.getElementById('loom-data').textContent);
  var tip = document.getElementById('tip');
  function el(parent, name, attrs, text) {
    var e = document.createElementNS(NS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }
  function fmt(b) {
    var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? String(Math.round(b)) : b.toFixed(b < 10 ? 2 : 1)) + ' ' + u[i];
  }
  function niceStep(max, ticks) {
    var raw = max / ticks, p = Math.pow(2, Math.floor(Math.log2(raw)));
    return raw / p > 1.5 ? 2 * p : p;  // powers of two suit byte axes
  }
  function showTip(ev, text) {
    tip.textContent = text;
    tip.style.display = 'block';
    tip.style.left = (ev.clientX + 12) + 'px';
    tip.style.top = (ev.clientY + 12) + 'px';
  }
  function hideTip() { tip.style.display = 'none'; }

  function drawTimeline(svg) {
    var W = 960, H = 320, L = 80, R = 20, T = 20, B = 44;
    var s = data.series, n = s.x.length, steps = s.unit === 'training step';
    if (n < 2) { el(svg, 'text', {x: 20, y: 40, 'class': 'empty'}, 'the snapshot has no history'); return; }
    var xmin = Math.min(0, s.x[0]), xmax = Math.max(xmin + 1, s.x[n - 1]);
    var ymax = Math.max(1, data.peaks.reserved, data.peaks.allocated, Math.max.apply(null, s.reserved));
    var step = niceStep(ymax, 5);
    ymax = Math.ceil(ymax * 1.05 / step) * step;
    function X(v) { return L + (W - L - R) * (v - xmin) / (xmax - xmin); }
    function Y(v) { return H - B - (H - T - B) * v / ymax; }
    var grid = el(svg, 'g', {'class': 'grid'}), axis = el(svg, 'g', {'class': 'axis'});
    for (var v = 0; v <= ymax + 1e-9; v += step) {
      el(grid, 'line', {x1: L, x2: W - R, y1: Y(v), y2: Y(v)});
      el(axis, 'text', {x: L - 6, y: Y(v) + 4, 'text-anchor': 'end'}, fmt(v));
    }
    var span = xmax - xmin, xstep = Math.max(1, Math.pow(10, Math.floor(Math.log10(span / 2))));
    if (span / xstep > 10) xstep *= 2;
    for (var x = Math.ceil(xmin / xstep) * xstep; x <= xmax; x += xstep) {
      el(axis, 'line', {x1: X(x), x2: X(x), y1: H - B, y2: H - B + 4});
      el(axis, 'text', {x: X(x), y: H - B + 16, 'text-anchor': 'middle', 'class': 'xtick'}, String(x));
      if (steps) el(grid, 'line', {x1: X(x), x2: X(x), y1: T, y2: H - B, 'class': 'step-line'});
    }
    el(axis, 'line', {x1: L, x2: W - R, y1: H - B, y2: H - B});
    el(axis, 'line', {x1: L, x2: L, y1: T, y2: H - B});
    el(axis, 'text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle', 'class': 'xlabel'}, s.unit);
    el(axis, 'text', {x: 14, y: (T + H - B) / 2, 'text-anchor': 'middle',
                      transform: 'rotate(-90 14 ' + (T + H - B) / 2 + ')'}, 'bytes');
    function path(key, area) {
      var d = '';
      for (var i = 0; i < n; i++) {
        d += (i === 0 ? 'M' : 'L') + X(s.x[i]).toFixed(1) + ',' + Y(s[key][i]).toFixed(1);
        if (i + 1 < n) d += 'L' + X(s.x[i + 1]).toFixed(1) + ',' + Y(s[key][i]).toFixed(1);
      }
      if (area) d += 'L' + X(s.x[n - 1]).toFixed(1) + ',' + Y(0) + 'L' + X(s.x[0]).toFixed(1) + ',' + Y(0) + 'Z';
      return d;
    }
    el(svg, 'path', {'class': 'area-reserved', d: path('reserved', true)});
    el(svg, 'path', {'class': 'area-allocated', d: path('allocated', true)});
    el(svg, 'path', {'class': 'line-reserved', d: path('reserved', false)});
    el(svg, 'path', {'class': 'line-allocated', d: path('allocated', false)});
    [['reserved', '#d97b0b'], ['allocated', '#2b62a3']].forEach(function (p) {
      var y = Y(data.peaks[p[0]]);
      el(svg, 'line', {'class': 'peak', x1: L, x2: W - R, y1: y, y2: y, stroke: p[1]});
      el(svg, 'text', {x: W - R - 4, y: y - 4, 'text-anchor': 'end', fill: p[1]},
         'peak ' + p[0] + ' ' + fmt(data.peaks[p[0]]));
    });
    s.ooms.forEach(function (x) { el(svg, 'line', {'class': 'oom', x1: X(x), x2: X(x), y1: T, y2: H - B}); });
    var cursor = el(svg, 'line', {'class': 'cursor', x1: 0, x2: 0, y1: T, y2: H - B, visibility: 'hidden'});
    svg.addEventListener('mousemove', function (ev) {
      var box = svg.getBoundingClientRect();
      var px = (ev.clientX - box.left) * W / box.width, target = xmin + (px - L) / (W - L - R) * (xmax - xmin);
      if (target < xmin || target > xmax) { cursor.setAttribute('visibility', 'hidden'); hideTip(); return; }
      var i = 0;
      while (i + 1 < n && s.x[i + 1] <= target) i++;
      cursor.setAttribute('x1', X(s.x[i])); cursor.setAttribute('x2', X(s.x[i]));
      cursor.setAttribute('visibility', 'visible');
      var where = steps ? 'step ' + s.x[i].toFixed(2) + ' (history event ' + s.event[i] + ')' : 'event ' + s.x[i];
      showTip(ev, where + '\nallocated ' + fmt(s.allocated[i]) + '\nreserved ' + fmt(s.reserved[i]));
    });
    svg.addEventListener('mouseleave', function () { cursor.setAttribute('visibility', 'hidden'); hideTip(); });
  }

  function drawSegments(svg, segs) {
    var W = 960, L = 330, R = 20, row = 18, bar = 12;
    var H = Math.max(40, segs.length * row + 16);
    svg.setAttribute('height', H);
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    if (!segs.length) { el(svg, 'text', {x: 20, y: 24, 'class': 'empty'}, 'no segments'); return; }
    var maxSize = Math.max.apply(null, segs.map(function (g) { return g.size; }));
    segs.forEach(function (g, k) {
      var y = 8 + k * row, w = Math.max(2, (W - L - R) * g.size / maxSize);
      el(svg, 'text', {x: L - 8, y: y + bar - 2, 'text-anchor': 'end'},
         g.address + '  ' + fmt(g.size) + (g.mapped !== g.size ? ' (' + fmt(g.mapped) + ' mapped)' : '') +
         '  ' + g.pool + ' s' + g.stream);
      g.blocks.forEach(function (b) {
        var r = el(svg, 'rect', {'class': 'block block-' + b[2], x: L + w * b[0] / g.size, y: y,
                                 width: Math.max(0.5, w * b[1] / g.size), height: bar});
        var t = b[6] + '  ' + b[2] + '\nsize ' + fmt(b[1]) + (b[2] === 'allocated' ? ' (requested ' + fmt(b[3]) + ')' : '') +
                (b[7] ? '\nop ' + b[7] : '') + '\nstream ' + b[4] + (b[5] ? '\ncontext ' + b[5] : '');
        el(r, 'title', {}, t);
      });
      g.unmapped.forEach(function (u) {
        var r = el(svg, 'rect', {'class': 'unmapped', x: L + w * u[0] / g.size, y: y + 3,
                                 width: Math.max(0.5, w * u[1] / g.size), height: bar - 6});
        el(r, 'title', {}, 'unmapped pages: ' + fmt(u[1]) + ' at offset ' + fmt(u[0]));
      });
      el(svg, 'rect', {'class': 'segment-outline', x: L, y: y, width: w, height: bar});
    });
  }

  drawTimeline(document.getElementById('timeline'));
  drawSegments(document.getElementById('segments'), data.segments);
  if (data.peak) {
    drawSegments(document.getElementById('segments-peak'), data.peak.segments);
    var views = {end: ['segments', 'ops-end'], peak: ['segments-peak', 'ops-peak']};
    function show(which) {
      for (var k in views) {
        views[k].forEach(function (id) { document.getElementById(id).style.display = k === which ? '' : 'none'; });
        document.getElementById('show-' + k).className = k === which ? 'on' : '';
      }
    }
    document.getElementById('show-end').addEventListener('click', function () { show('end'); });
    document.getElementById('show-peak').addEventListener('click', function () { show('peak'); });
  }
  document.body.setAttribute('data-rendered', 'yes');
})();
)JS";

}  // namespace

std::string format_bytes(double b) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while ((b >= 1024 || b <= -1024) && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[48];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%.0f B", b);
  } else {
    std::snprintf(buf, sizeof(buf), b < 10 && b > -10 ? "%.2f %s" : "%.1f %s", b, units[u]);
  }
  return buf;
}

std::string memory_html(const Snapshot& s, const std::string& source) {
  size_t blocks = 0;
  for (const SegmentInfo& seg : s.segments) blocks += seg.blocks.size();
  Json data = Json::object({{"device", s.device},
                            {"capacity", s.capacity},
                            {"peaks", Json::object({{"allocated", s.stats.allocated_bytes.peak},
                                                    {"reserved", s.stats.reserved_bytes.peak}})},
                            {"series", timeline(s)},
                            {"segments", segments_json(s.segments)}});
  std::string peak_label;
  if (s.peak) {
    peak_label = "at peak (";
    if (s.peak->step >= 0) {
      peak_label +=
          "after " + std::to_string(s.peak->step) + (s.peak->step == 1 ? " step, " : " steps, ");
    }
    peak_label += format_bytes(static_cast<double>(s.peak->allocated)) + " allocated)";
    data.set("peak", Json::object({{"step", s.peak->step},
                                   {"allocated", s.peak->allocated},
                                   {"reserved", s.peak->reserved},
                                   {"segments", segments_json(s.peak->segments)}}));
  }
  std::string o;
  o +=
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>loom memory: ";
  o += xml_escape(source);
  o += "</title>\n<style>";
  o += kStyle;
  o += "</style>\n</head>\n<body>\n<h1>loom memory snapshot: " + xml_escape(source) + "</h1>\n";
  o += "<p class=\"meta\">device <code>" + xml_escape(s.device) + "</code>, capacity " +
       xml_escape(format_bytes(static_cast<double>(s.capacity))) + "; config <code>" +
       xml_escape(s.config) + "</code>; " + std::to_string(s.segments.size()) + " segments, " +
       std::to_string(blocks) + " blocks, " + std::to_string(s.history.size()) +
       " history events</p>\n";
  o += "<noscript><p>The charts are drawn by the page's script; the statistics below need "
       "none.</p></noscript>\n";
  o +=
      "<h2>Memory over time</h2>\n"
      "<p class=\"legend\"><span class=\"sw area-reserved\" "
      "style=\"background:#f2c48d\"></span>reserved "
      "(in segments)<span class=\"sw\" style=\"background:#8cb3dd\"></span>allocated (handed out)"
      "<span class=\"sw\" style=\"background:#c00\"></span>out of memory</p>\n"
      "<svg id=\"timeline\" class=\"chart\" width=\"960\" height=\"320\" viewBox=\"0 0 960 320\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"allocated and reserved bytes "
      "over the history's events or training steps\"></svg>\n";
  o += "<h2>Segments</h2>\n";
  if (s.peak) {
    o += "<p id=\"map-choice\">Show the segments <button id=\"show-end\" class=\"on\">at the end"
         "</button><button id=\"show-peak\">" +
         xml_escape(peak_label) + "</button></p>\n";
  }
  o +=
      "<p class=\"legend\"><span class=\"sw\" style=\"background:#4c78a8\"></span>allocated"
      "<span class=\"sw\" style=\"background:#e8e8e8\"></span>free (cached)"
      "<span class=\"sw\" style=\"background:#f58518\"></span>pending (freed, waiting for other "
      "streams)<span class=\"sw\" style=\"background:#fff;border:1px dashed #bbb\"></span>unmapped "
      "pages of an expandable segment. Bars are to scale with the largest segment; hover a block "
      "for its address, size, "
      "operator and context.</p>\n"
      "<svg id=\"segments\" class=\"chart\" width=\"960\" height=\"40\" viewBox=\"0 0 960 40\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" aria-label=\"segments and their "
      "blocks at the end\"></svg>\n";
  if (s.peak) {
    o += "<svg id=\"segments-peak\" class=\"chart\" width=\"960\" height=\"40\" "
         "viewBox=\"0 0 960 40\" style=\"display:none\" xmlns=\"http://www.w3.org/2000/svg\" "
         "role=\"img\" aria-label=\"segments and their blocks " +
         xml_escape(peak_label) + "\"></svg>\n";
  }
  o += "<h3>Live memory by operator</h3>\n" + ops_table("ops-end", s.segments);
  if (s.peak) {
    std::string peak_ops = ops_table("ops-peak", s.peak->segments);
    peak_ops.insert(peak_ops.find('>'), " style=\"display:none\"");
    o += peak_ops;
  }
  o += "<h2>Statistics</h2>\n" + stats_table(s.stats);
  o += "<div id=\"tip\"></div>\n<script type=\"application/json\" id=\"loom-data\">";
  o += script_safe_json(data);
  o += "</script>\n<script>";
  o += kScript;
  o += "</script>\n</body>\n</html>\n";
  return o;
}

}  // namespace loom::cli
