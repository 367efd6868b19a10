// Mode reduce-overhead: recording a compiled graph's replay as one CUDA graph (see
// compiler/cuda_graph.h).
//
// Note [CUDA graphs]
//   A replay launches one kernel or library call per step, each a few microseconds of host work;
//   a CUDA graph launches them all at once. On the first replay of a graph in mode reduce-overhead
//   the compiled function records it:
//   - on a stream of its own, after a warm-up replay there (libraries initialise, the caching
//     allocator caches the blocks the replay uses on that stream), the replay runs once more under
//     stream capture, over static input buffers the call's inputs were copied into;
//   - the allocator keeps that stream's memory (Note [Kept streams]): the graph addresses every
//     block its recording used, including those freed during it, and since free blocks are per
//     stream and nothing else allocates on this one, no other request can take them.
//   The recording starts with the copies of the inputs into the static buffers, so they are
//   nodes of the graph. A replay points each copy node at its call's input, or disables it for an
//   input that is the previous call's tensor with its version counter unchanged (it is held, so
//   its memory cannot be another's, and the buffer has its values): host-side updates of the
//   executable, no launch. It then launches the graph on the caller's current stream, one launch
//   for the whole call, and returns the static outputs. (Where the runtime recorded a copy as
//   something other than a copy node, that input is copied before the launch instead; the report
//   counts the copy nodes.) The next replay overwrites them,
//   so if the caller still holds one then (its handle or a view of it), that result is first copied
//   out and the copy's memory swapped into the caller's storage: what the caller holds never
//   changes under it. A caller that drops its results before the next call pays no copy. What a
//   recording cannot hold is refused, with the reason in the report and a warning once, and the
//   graph replays as in mode default: symbolic sizes (a recording is for one set of sizes), host
//   reads (a graph break), in-place writes and random draws (a replay would repeat the recorded
//   draws), results that require grad, inputs that are not contiguous CUDA tensors of one device,
//   CPU tensors read on the host, and results that alias an input, a constant or each other.
//   Constants (a module's parameters) are recorded by address: an optimizer's in-place update is
//   seen by the next replay.
#include "compiler/cuda_graph.h"

#include <string>

#include "loom/autograd.h"
#include "loom/cuda.h"
#include "loom/device_interface.h"
#include "loom/error.h"
#include "loom/memory/cuda_memory.h"
#include "loom/ops.h"

namespace loom::compiler {
namespace {

// Why `g` cannot be recorded for these inputs, or "".
std::string refusal(const Graph& g, const std::vector<Tensor>& inputs) {
  if (!g.symbols.empty())
    return "the graph has symbolic sizes (a recording holds one set of sizes)";
  if (!g.breaks.empty() || !g.host_nodes().empty())
    return "the graph reads a value on the host (a graph break)";
  for (const Step& s : g.steps) {
    if (s.kernel >= 0) continue;
    const Node& n = g.nodes[static_cast<size_t>(s.node)];
    if (n.op.schema().is_mutable()) return n.op.name() + " writes in place";
    if (is_random(n))
      return n.op.name() + " draws random numbers (a replay would repeat the recorded ones)";
  }
  if (inputs.empty()) return "the function has no inputs";
  const bool grad = autograd::GradMode::is_enabled();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || t.device().type() != DeviceType::CUDA || t.device() != inputs[0].device())
      return "input " + std::to_string(i) + " is not on " + inputs[0].device().str();
    if (!t.is_contiguous()) return "input " + std::to_string(i) + " is not contiguous";
    if (grad && t.requires_grad())
      return "input " + std::to_string(i) +
             " requires grad (a recording is for inference: run under no_grad)";
  }
  for (size_t c = 0; c < g.constants.size(); ++c) {
    const Tensor& t = g.constants[c];
    if (!t.defined()) continue;
    if (grad && t.requires_grad())
      return "constant " + std::to_string(c) +
             " requires grad (a recording is for inference: run under no_grad)";
    if (t.device().type() != DeviceType::CUDA && !t.impl()->is_wrapped_number())
      return "constant " + std::to_string(c) + " is a " + t.device().str() +
             " tensor read on the host when the graph runs";
  }
  return "";
}

// Why the recorded outputs cannot be handed out as they are, or "".
std::string output_refusal(const std::vector<Tensor>& out, const std::vector<Tensor>& static_in,
                           const std::vector<Tensor>& constants) {
  for (size_t k = 0; k < out.size(); ++k) {
    const Tensor& t = out[k];
    const std::string name = "result " + std::to_string(k);
    if (!t.defined() || t.device().type() != DeviceType::CUDA) return name + " is not on CUDA";
    if (!t.is_contiguous() || t.storage_offset() != 0 ||
        t.storage()->nbytes() != static_cast<size_t>(t.numel()) * t.element_size())
      return name + " is a view of a larger buffer";
    auto same = [&](const Tensor& u) {
      return u.defined() && u.storage().get() == t.storage().get();
    };
    for (const Tensor& u : static_in)
      if (same(u)) return name + " is an input or a view of one";
    for (const Tensor& u : constants)
      if (same(u)) return name + " is a constant or a view of one";
    for (size_t j = 0; j < k; ++j)
      if (same(out[j])) return name + " shares memory with result " + std::to_string(j);
  }
  return "";
}

}  // namespace

std::unique_ptr<CudaGraph> CudaGraph::record(const Graph& g, const std::vector<Tensor>& inputs,
                                             std::vector<Tensor>* outputs, std::string* why) {
  *why = refusal(g, inputs);
  if (!why->empty()) return nullptr;
  const Device dev = inputs[0].device();
  std::unique_ptr<CudaGraph> cg(new CudaGraph());
  cg->stream_ = cuda::new_stream(dev.index(), 0);
  const Stream caller = current_stream(dev);
  memory::CachingAllocator& alloc = cuda::caching_allocator(dev.index());
  HostMismatch mismatch;
  {
    Event ready(DeviceType::CUDA);
    ready.record(caller);
    StreamGuard on(cg->stream_);
    ready.block(cg->stream_);
    autograd::NoGradGuard no_grad;
    for (const Tensor& t : inputs) {
      cg->static_in_.push_back(empty(t.sizes(), TensorOptions(t.dtype()).with_device(dev)));
      cg->static_in_.back().copy_(t);
    }
    std::vector<Tensor> warm;
    g.run(cg->static_in_, &warm, &mismatch);
    warm.clear();
    alloc.keep_stream(cg->stream_);
    cg->kept_ = true;
    cuda::graph_capture_begin(cg->stream_);
    try {
      // The input copies are recorded too: a replay points them at its call's inputs.
      for (size_t i = 0; i < inputs.size(); ++i)
        copy_bytes(cg->static_in_[i].data_ptr(), dev, inputs[i].data_ptr(), dev,
                   cg->static_in_[i].nbytes(), /*non_blocking=*/true);
      g.run(cg->static_in_, &cg->static_out_, &mismatch);
    } catch (const Error& e) {
      cuda::graph_capture_abort(cg->stream_);
      *why = std::string("recording raised ") + e.kind() + ": " + e.what();
      return nullptr;
    }
    cg->rec_ = cuda::graph_capture_end(cg->stream_);
    for (size_t i = 0; i < inputs.size(); ++i) {
      cg->copy_node_.push_back(cg->static_in_[i].nbytes() == 0
                                   ? nullptr
                                   : cuda::graph_copy_node(cg->rec_, cg->static_in_[i].data_ptr()));
      cg->copy_src_.push_back(inputs[i].data_ptr());
    }
    // The recording's own stream must be done before the graph runs on another.
    Event done(DeviceType::CUDA);
    done.record(cg->stream_);
    done.block(caller);
  }
  *why = output_refusal(cg->static_out_, cg->static_in_, g.constants);
  if (!why->empty()) return nullptr;
  *outputs = cg->replay(inputs);
  return cg;
}

CudaGraph::~CudaGraph() {
  cuda::graph_destroy(rec_);
  static_out_.clear();
  static_in_.clear();
  if (kept_) cuda::caching_allocator(stream_.device().index()).release_stream(stream_);
}

// The results of the previous replay that the caller still holds are copied out: the copy's
// memory goes into the caller's storage, the graph's memory into a storage of ours.
void CudaGraph::take_back_outputs() {
  for (Tensor& o : static_out_) {
    if (o.use_count() == 1 && o.storage()->use_count() == 1) continue;
    Tensor copy = o.clone();
    o.storage().get()->swap_data(*copy.storage().get());
    o = copy;
    ++outputs_copied_;
  }
}

std::vector<Tensor> CudaGraph::replay(const std::vector<Tensor>& inputs) {
  const Stream stream = current_stream(static_in_[0].device());
  autograd::NoGradGuard no_grad;
  if (replays_ > 0 && last_ != stream) {
    Event previous(DeviceType::CUDA);
    previous.record(last_);
    previous.block(stream);
  }
  take_back_outputs();
  // The guards hold: same dtype, sizes and (contiguous) strides as recorded. An input that is the
  // previous call's tensor, unwritten since (its version counter), is in the buffer already.
  last_in_.resize(inputs.size());
  last_version_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    const bool unchanged = t.impl() == last_in_[i].impl() && t.version() == last_version_[i];
    if (copy_node_[i] != nullptr) {
      // The graph copies it: point the node at this input, or skip it (no launch either way).
      const void* src = unchanged ? nullptr : t.data_ptr();
      if (src != copy_src_[i]) {
        copy_src_[i] = src;
        if (!cuda::graph_set_copy(rec_, copy_node_[i], src)) {
          copy_node_[i] = nullptr;  // refused (and skipped from now on): copied before launches
          ++copies_refused_;
        }
      }
    }
    if (copy_node_[i] == nullptr && !unchanged) {
      copy_bytes(static_in_[i].data_ptr(), static_in_[i].device(), t.data_ptr(), t.device(),
                 static_in_[i].nbytes(), /*non_blocking=*/true);
    }
    if (unchanged) continue;
    last_in_[i] = t;  // held: the memory the copy reads stays the input's
    last_version_[i] = t.version();
    ++input_copies_;
  }
  cuda::graph_launch(rec_, stream);
  last_ = stream;
  ++replays_;
  return static_out_;
}

std::string CudaGraph::str() const {
  size_t in_graph = 0;
  for (void* n : copy_node_) in_graph += n != nullptr;
  return "cuda graph: " + std::to_string(rec_.nodes) + " node(s) recorded (" +
         std::to_string(in_graph) + " of " + std::to_string(copy_node_.size()) +
         " input copies among them" +
         (copies_refused_ > 0 ? ", " + std::to_string(copies_refused_) +
                                    " refused a new source by the runtime: copied before launches"
                              : std::string()) +
         "); " + std::to_string(replays_) + " replay(s), " + std::to_string(input_copies_) +
         " input(s) copied in; " + std::to_string(outputs_copied_) +
         " result(s) still held by the caller copied out first";
}

}  // namespace loom::compiler
