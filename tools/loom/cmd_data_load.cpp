// `loom data load DIR`: runs the loader over a shard dataset and says what it did: the plan
// (describe()), throughput, how long the consumer waited, queue occupancy, worker time per stage,
// the batch buffer pool, and the state a checkpoint would record.
#include <chrono>
#include <cstdio>
#include <memory>

#include "cli.h"
#include "loom/data/loader.h"
#include "loom/device_interface.h"
#include "loom/error.h"

namespace loom::cli {
namespace {

void usage() {
  std::printf(
      "usage: loom data load DIR [--batch N] [--workers K] [--prefetch P] [--io pread|mmap|uring]\n"
      "                          [--world W --rank R] [--seed S] [--epoch E] [--epochs N]\n"
      "                          [--shuffle block|global|none] [--block-size N] [--pad pad|drop]\n"
      "                          [--resume-from N] [--drop-last] [--no-pin] [--device cpu|cuda]\n"
      "  Reads epochs of DIR (made by `loom data pack`) through the data loader, copying every "
      "column\n"
      "  that batches as is, and reports samples/s, the consumer's wait for data, queue occupancy, "
      "the\n"
      "  workers' read and decode time, the buffer pool and the resumable state.\n"
      "  --device cuda  also moves each batch to the GPU through the device stage (pinned "
      "buffers,\n"
      "                 copies on a side stream, double-buffered) and reports the copy bandwidth\n"
      "                 and how long each step waited\n");
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"help", "drop-last", "no-pin"},
            {"batch", "workers", "prefetch", "io", "world", "rank", "seed", "epoch", "epochs",
             "shuffle", "block-size", "pad", "resume-from", "device"});
  if (args.flag("help") || args.positionals().size() != 1) {
    usage();
    return args.flag("help") ? 0 : 2;
  }
  data::LoaderOptions o;
  o.batch_size = args.get_int("batch", 128, 1, int64_t{1} << 24);
  o.workers = static_cast<int>(args.get_int("workers", 2, 0, 256));
  o.prefetch = static_cast<int>(args.get_int("prefetch", 2, 1, 1024));
  o.io = data::parse_io_engine(args.get_or("io", "pread"));
  o.world = static_cast<int>(args.get_int("world", 1, 1, int64_t{1} << 20));
  o.rank = static_cast<int>(args.get_int("rank", 0, 0, o.world - 1));
  o.order.seed = static_cast<uint64_t>(args.get_int("seed", 0, 0));
  o.order.shuffle = data::parse_shuffle_mode(args.get_or("shuffle", "block"));
  o.order.block_size = args.get_int("block-size", o.order.block_size, 1);
  o.order.pad = data::parse_pad_policy(args.get_or("pad", "pad"));
  o.drop_last = args.flag("drop-last");
  o.pin_memory = !args.flag("no-pin");
  const int64_t first_epoch = args.get_int("epoch", 0, 0, int64_t{1} << 40);
  const int64_t epochs = args.get_int("epochs", 1, 1, 1000000);
  auto ds = std::make_shared<const data::ShardReader>(args.positionals()[0]);
  const Device device(args.get_or("device", "cpu"));
  data::Loader loader(ds, o);
  std::printf("%s\n", loader.describe().c_str());
  // Every batch goes through the device stage; on the CPU it passes batches through.
  data::DeviceStage stage([&] { return loader.next(); }, device);
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t e = first_epoch; e < first_epoch + epochs; ++e) {
    if (e == first_epoch && args.get("resume-from")) {
      data::LoaderState s = loader.state();
      s.epoch = e;
      s.consumed = args.get_int("resume-from", 0, 0);
      loader.load_state(s);
    } else {
      loader.set_epoch(e);
    }
    int64_t batches = 0, samples = 0;
    while (auto b = stage.next()) {
      ++batches;
      samples += b->size();
    }
    std::printf("epoch %lld: %lld batches, %lld samples\n", static_cast<long long>(e),
                static_cast<long long>(batches), static_cast<long long>(samples));
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const data::LoaderMetrics m = loader.metrics();
  std::printf(
      "%.0f samples/s (%.1f MB/s read); consumer waited %.3f s in total, %.1f us per batch on "
      "average, "
      "%.2f ms at most; %.2f batches ready on average\n",
      static_cast<double>(m.samples) / secs, static_cast<double>(m.bytes_read) / secs / 1e6,
      m.wait_seconds, m.batches ? m.wait_seconds / static_cast<double>(m.batches) * 1e6 : 0.0,
      m.max_wait_seconds * 1e3, m.mean_occupancy());
  std::printf(
      "workers: %.3f s reading, %.3f s decoding and collating; pool: %lld buffers of %zu bytes "
      "allocated, %lld reuses, %s\n",
      m.read_seconds, m.decode_seconds, static_cast<long long>(m.pool.allocated),
      m.pool.buffer_bytes, static_cast<long long>(m.pool.reused),
      m.pool.pinned ? "page-locked" : "not page-locked");
  if (!device.is_cpu()) {
    device_interface(device.type()).synchronize_device(device.index());
    const data::DeviceStageMetrics d = stage.metrics();
    std::printf(
        "device stage (%s): %lld batches, %.1f MB copied from %s host buffers at %.2f GB/s while "
        "copying; next() took %.1f us per batch (%.1f us of it waiting for the loader); %lld of "
        "%lld batches were handed out before their copy had finished\n",
        device.str().c_str(), static_cast<long long>(d.batches), static_cast<double>(d.bytes) / 1e6,
        d.pinned ? "page-locked" : "pageable", d.copy_gbps(),
        d.batches ? d.next_seconds / static_cast<double>(d.batches) * 1e6 : 0.0,
        d.batches ? d.source_seconds / static_cast<double>(d.batches) * 1e6 : 0.0,
        static_cast<long long>(d.copies_waited), static_cast<long long>(d.batches));
  }
  std::printf("state: %s\n", loader.state().to_json().dump().c_str());
  return 0;
}

const RegisterCommand kLoad("data load",
                            "read a shard dataset through the loader and report what it did", run);

}  // namespace
}  // namespace loom::cli
