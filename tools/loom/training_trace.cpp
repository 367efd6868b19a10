// record_training_trace: a real loom training workload recorded under a RecordingAllocator (see
// Note [training trace] in training_trace.h).
#include <memory>
#include <random>

#include "loom/autograd.h"
#include "loom/error.h"
#include "loom/nn.h"
#include "loom/ops.h"
#include "loom/optim.h"
#include "loom/parallel.h"
#include "training_trace.h"

namespace loom::memory {
namespace {

// Installs `rec` as the CPU allocator with one intra-op thread; restores both when destroyed.
class RecordingScope {
 public:
  explicit RecordingScope(RecordingAllocator& rec)
      : saved_(get_allocator(DeviceType::CPU)), threads_(get_num_threads()) {
    set_num_threads(1);
    set_allocator(DeviceType::CPU, &rec);
  }
  ~RecordingScope() {
    set_allocator(DeviceType::CPU, saved_);
    set_num_threads(threads_);
  }
  RecordingScope(const RecordingScope&) = delete;
  RecordingScope& operator=(const RecordingScope&) = delete;

 private:
  Allocator* saved_;
  int threads_;
};

}  // namespace

AllocTrace record_training_trace(const TrainingTraceOptions& o) {
  LOOM_CHECK(o.steps > 0, "[mem record] steps must be positive but got ", o.steps);
  LOOM_CHECK(o.min_batch > 0 && o.min_batch <= o.max_batch, "[mem record] batch range ",
             o.min_batch, "..", o.max_batch, " is empty or not positive");
  LOOM_CHECK(o.hidden > 0, "[mem record] hidden width must be positive but got ", o.hidden);
  constexpr int64_t kIn = 784, kClasses = 10;
  const int64_t hidden = o.hidden;
  RecordingAllocator rec(*get_allocator(DeviceType::CPU),
                         "loom mem record: MLP 784-" + std::to_string(hidden) +
                             "(LayerNorm, GELU)-" + std::to_string(hidden) + "(GELU)-10, Adam, " +
                             std::to_string(o.steps) + " steps, batch " +
                             std::to_string(o.min_batch) + ".." + std::to_string(o.max_batch) +
                             ", seed " + std::to_string(o.seed));
  AllocTrace trace;
  {
    // Model and optimizer are built and destroyed inside the scope of `rec` (declared above them),
    // so every deleter that logs into it runs before it goes away.
    RecordingScope scope(rec);
    Generator gen(o.seed);
    std::mt19937_64 batch_rng(o.seed);
    std::uniform_int_distribution<int64_t> batch_size(o.min_batch, o.max_batch);
    auto model = std::make_shared<nn::Sequential>();
    model->push_back(std::make_shared<nn::Linear>(kIn, hidden, true, &gen));
    model->push_back(std::make_shared<nn::LayerNorm>(std::vector<int64_t>{hidden}));
    model->push_back(std::make_shared<nn::GELU>());
    model->push_back(std::make_shared<nn::Linear>(hidden, hidden, true, &gen));
    model->push_back(std::make_shared<nn::GELU>());
    model->push_back(std::make_shared<nn::Linear>(hidden, kClasses, true, &gen));
    optim::AdamOptions ao;
    ao.lr = 1e-3;
    optim::Adam opt(model->parameters(), ao);
    for (int step = 0; step < o.steps; ++step) {
      const int64_t b = batch_size(batch_rng);
      Tensor x = rand({b, kIn}, {}, gen);
      Tensor y = randint(0, kClasses, {b}, DType::Int64, gen);
      opt.zero_grad(true);
      Tensor loss = cross_entropy(model->forward(x), y);
      loss.backward();
      opt.step();
    }
    trace = rec.trace();
  }
  return trace;
}

}  // namespace loom::memory
