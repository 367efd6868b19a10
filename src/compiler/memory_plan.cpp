// Memory planning of the inductor backend: which buffers generated kernels write into.
//
// Note [Memory planning]
//   A replay releases each intermediate after its last use (Graph::release_after), so it never
//   holds more than the eager call did; the plan goes further for the outputs of generated kernels,
//   whose allocation the compiler controls:
//   - In place: a kernel with one output and no reduction writes it over an input that dies at
//     that kernel, when the input has the output's sizes and dtype. Each element is read before
//     it is written, at the same index, and the output depends on every input of the kernel (dead
//     code was removed), so the write cannot overtake the read.
//   - Reuse: any other kernel output takes the buffer of a value that died at an earlier step,
//     of the same byte size up to 1/8 larger (the best fit, as a static graph's sizes are known),
//     so a chain of kernels cycles through a few buffers instead of asking the allocator for each.
//   The donors are the outputs of nodes and kernels that are not returned; their buffer is taken
//   on a call only if nothing else holds it then (the value's tensor and its storage are referred
//   to by the replay alone: no view of it, no autograd node that saved it, no kernel that records
//   a backward over the in-place input), else the kernel allocates as usual. The plan is thus a
//   decision made once, and safety a check made per call; both are counted in the report
//   ("memory plan: ..." among the passes, and the buffers taken and refused at run time).
//   Dynamic graphs plan in place only (their sizes change between calls; the check compares them).
#include <map>
#include <string>

#include "compiler/graph.h"

namespace loom::compiler {
namespace {

int64_t value_bytes(const Value& v) {
  int64_t n = static_cast<int64_t>(element_size(v.dtype));
  for (int64_t s : v.sizes) n *= s;
  return n;
}

}  // namespace

std::string MemoryPlan::str() const {
  std::string s = "memory plan: " + std::to_string(reused) + " of " + std::to_string(outputs) +
                  " kernel output(s) reuse a dead buffer (" + std::to_string(written_in_place) +
                  " in place), " + bytes_str(reused_bytes) + " of " + bytes_str(bytes) +
                  " not allocated";
  return s;
}

void plan_memory(Graph& g) {
  MemoryPlan& p = g.memory;
  p = MemoryPlan{};
  if (g.kernels.empty()) return;
  const size_t nv = g.values.size(), ns = g.steps.size();
  std::vector<bool> returned(nv, false), eligible(nv, false);
  for (ValueId id : g.outputs) returned[static_cast<size_t>(id)] = true;
  std::vector<size_t> dies(nv, SIZE_MAX);
  for (size_t k = 0; k < ns; ++k)
    for (ValueId id : g.release_after[k]) dies[static_cast<size_t>(id)] = k;
  for (size_t i = 0; i < nv; ++i) {
    const Value& v = g.values[i];
    eligible[i] = v.kind == Value::Kind::NodeOutput && !returned[i] && dies[i] != SIZE_MAX;
  }
  const bool dynamic = !g.symbols.empty();
  p.take.assign(ns, {});
  p.in_place.assign(ns, {});
  p.donor.assign(nv, false);
  // Dead buffers not taken yet, by byte size (per device).
  std::multimap<std::pair<int64_t, std::string>, ValueId> free;
  for (size_t k = 0; k < ns; ++k) {
    const Step& s = g.steps[k];
    if (s.kernel >= 0) {
      const FusedKernel& f = g.kernels[static_cast<size_t>(s.kernel)];
      std::vector<ValueId>& take = p.take[k];
      take.assign(f.outputs.size(), -1);
      for (size_t o = 0; o < f.outputs.size(); ++o) {
        const Value& out = g.values[static_cast<size_t>(f.outputs[o])];
        const bool reduced = f.is_reduced_output(o);
        ++p.outputs;
        p.bytes += value_bytes(out);
        if (f.outputs.size() == 1 && f.reduce == 0) {
          for (size_t j = 0; j < f.inputs.size() && take[o] < 0; ++j) {
            const ValueId in = f.inputs[j];
            const Value& v = g.values[static_cast<size_t>(in)];
            if (!eligible[static_cast<size_t>(in)] || dies[static_cast<size_t>(in)] != k ||
                !f.column_steps[j] || v.dtype != out.dtype || v.sizes != out.sizes ||
                v.device != out.device)
              continue;
            if (dynamic) {
              bool same = v.sym_sizes.size() == out.sym_sizes.size();
              for (size_t d = 0; same && d < v.sym_sizes.size(); ++d)
                same = v.sym_sizes[d].str() == out.sym_sizes[d].str();
              if (!same) continue;
            }
            take[o] = in;
            p.in_place[k].push_back(in);
            ++p.written_in_place;
          }
        }
        if (take[o] < 0 && !dynamic && !reduced) {
          const int64_t want = value_bytes(out);
          auto it = free.lower_bound({want, out.device.str()});
          if (it != free.end() && it->first.second == out.device.str() &&
              it->first.first - want <= want / 8) {
            take[o] = it->second;
            free.erase(it);
          }
        }
        if (take[o] >= 0) {
          p.donor[static_cast<size_t>(take[o])] = true;
          ++p.reused;
          p.reused_bytes += value_bytes(out);
        }
      }
    }
    for (ValueId id : g.release_after[k]) {
      if (!eligible[static_cast<size_t>(id)]) continue;
      bool taken_here = false;
      for (ValueId t : p.in_place[k]) taken_here = taken_here || t == id;
      const Value& v = g.values[static_cast<size_t>(id)];
      if (!taken_here && v.contiguous)
        free.emplace(std::make_pair(value_bytes(v), v.device.str()), id);
    }
  }
  if (p.reused == 0) p.take.clear();
}

}  // namespace loom::compiler
