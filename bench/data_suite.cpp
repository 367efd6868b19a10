// `loom bench data`: loom's loader against PyTorch's DataLoader (loom-anchor-dataloader, a Python
// script run with Debian's python3-torch) on Fashion-MNIST, same transforms (random crop 28 with
// padding 2, horizontal flip with p = 0.5, scale and normalise), same batch (128), 0 and 2 workers.
// Both sides start their workers outside the timed region and drop each batch at once.
//
// overhead_w0 is loom's loader cost per batch beyond decoding: the time per batch of the loader
// with no workers minus the time the same decode + transform work takes in a bare loop.
#include <chrono>
#include <memory>

#include "bench.h"
#include "loom/data/loader.h"
#include "loom/data/pack.h"
#include "loom/datasets.h"

namespace loom::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kBatch = 128;

std::vector<std::shared_ptr<data::FieldTransform>> fields() {
  data::ImageOptions io;
  io.crop_h = io.crop_w = 28;
  io.padding = 2;
  io.random_crop = true;
  io.flip_p = 0.5;
  io.mean = {0.2860};
  io.std = {0.3530};
  return {data::image_column("image", io), data::copy_column("label")};
}

data::LoaderOptions options(int workers) {
  data::LoaderOptions o;
  o.batch_size = kBatch;
  o.workers = workers;
  o.prefetch = 2;
  o.fields = fields();
  return o;
}

// samples/s over one epoch (a fifth when quick).
double loader_rate(const std::shared_ptr<const data::ShardReader>& ds, int workers, bool quick,
                   int64_t epoch) {
  data::Loader l(ds, options(workers));
  l.set_epoch(epoch);
  const int64_t batches = quick ? l.batches_in_epoch() / 5 : l.batches_in_epoch();
  auto first = l.next();  // workers started, as the anchor's
  first.reset();
  int64_t seen = 0;
  const auto t0 = Clock::now();
  for (int64_t b = 1; b < batches; ++b) {
    auto x = l.next();
    seen += x->size();
  }
  return static_cast<double>(seen) / std::chrono::duration<double>(Clock::now() - t0).count();
}

// Microseconds per batch of the loader with no workers, minus a bare loop doing the same reads,
// decodes and transforms for the same samples.
double overhead_us(const std::shared_ptr<const data::ShardReader>& ds, bool quick) {
  const int64_t batches = quick ? 40 : 200;
  auto o = options(0);
  data::Loader l(ds, o);
  l.set_epoch(3);
  const auto t0 = Clock::now();
  std::vector<std::vector<int64_t>> ids;
  for (int64_t b = 0; b < batches; ++b) ids.push_back(l.next()->ids);
  const double loader_s = std::chrono::duration<double>(Clock::now() - t0).count();
  auto f = fields();
  std::vector<data::FieldSpec> specs;
  for (auto& x : f) specs.push_back(x->spec(ds->schema()));
  std::vector<float> img(static_cast<size_t>(kBatch) * 784);
  std::vector<int64_t> lab(static_cast<size_t>(kBatch));
  std::string buf, scratch;
  const auto t1 = Clock::now();
  for (int64_t b = 0; b < batches; ++b) {
    for (size_t r = 0; r < ids[static_cast<size_t>(b)].size(); ++r) {
      const int64_t id = ids[static_cast<size_t>(b)][r];
      data::SampleView v = ds->read(id, buf, scratch);
      data::SampleContext ctx;
      ctx.id = id;
      ctx.epoch = 3;
      ctx.position = b * kBatch + static_cast<int64_t>(r);
      ctx.rng_seed = data::sample_seed(0, 3, ctx.position);
      f[0]->apply(v, ctx, img.data() + r * 784);
      f[1]->apply(v, ctx, lab.data() + r);
    }
  }
  const double bare_s = std::chrono::duration<double>(Clock::now() - t1).count();
  return (loader_s - bare_s) / static_cast<double>(batches) * 1e6;
}

std::vector<Measure> setup_data(const SuiteOptions& opt) {
  const std::string dir =
      data::fashion_mnist_shards(data::default_fashion_mnist_dir(), /*train=*/true);
  auto ds = std::make_shared<data::ShardReader>(dir);
  std::printf(
      "data: %s (%lld samples, %zu shard(s)); batch %lld; transforms: random crop 28 pad 2, "
      "flip 0.5, normalise\n",
      dir.c_str(), static_cast<long long>(ds->size()), ds->shards().size(),
      static_cast<long long>(kBatch));
  std::shared_ptr<const data::ShardReader> cds = ds;
  auto epoch = std::make_shared<int64_t>(0);
  const bool quick = opt.quick;
  std::vector<Measure> m;
  for (int workers : {0, 2}) {
    m.push_back(
        {"loader_w" + std::to_string(workers), "samples/s", false, 5.0, 1,
         [cds, workers, quick, epoch] { return loader_rate(cds, workers, quick, ++*epoch); }});
  }
  m.push_back(
      {"overhead_w0", "us/batch", true, 0, 1, [cds, quick] { return overhead_us(cds, quick); }});
  m.back().value_target = 50;  // loom's own cost; the anchor has no such row
  return m;
}

const RegisterSuite kData(Suite{
    "data", "loom's loader vs PyTorch's DataLoader on Fashion-MNIST (0 and 2 workers)",
    "loom-anchor-dataloader", "PyTorch 1.13 DataLoader (python3-torch)", setup_data, nullptr});

}  // namespace
}  // namespace loom::bench
