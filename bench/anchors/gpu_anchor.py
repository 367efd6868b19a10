#!/usr/bin/env python3
# Anchor for `loom bench gpu`: PyTorch on CUDA (on the GPU machine, python3 has torch 2.11 with
# CUDA). Speaks the bench driver's protocol: reads "NAME THREADS QUICK" lines, answers "NAME VALUE"
# ("NAME nan" for names it does not know, and for everything where torch or a CUDA device is
# missing). Each measurement mirrors its loom side in bench/gpu_suite.cpp (Note [gpu suite] there):
# same sizes and units; device time from torch.cuda.Event pairs around each repetition, queued back
# to back after warm-up, one synchronisation, the median repetition; TF32 off except in
# gemm_tf32_8192; cuDNN's heuristics (benchmark off). The eager overhead rows are torch's C++ API
# (ATen), compiled on first use against the headers and libraries in the torch package (CPP_ANCHOR
# below; g++ must be on PATH); eager_add_overhead_py is the same loop in Python, for information.
import math
import statistics
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # answer nan to everything
    torch = None

N256M = 256 << 20
ROWS, COLS = 32768, 1024
GEMM = 8192
STEP_BATCH = 128
IMAGE_BATCH = (128, 3, 224, 224)


# The C++ side of the eager overhead rows: host time per call of at::add on 1-element CUDA float
# tensors (a fresh output each call; add_out: into one preallocated output), many calls and one
# synchronisation per repetition, the median of the repetitions. Autograd is on, as in loom, and no
# tensor requires grad. Prints one number, microseconds per call.
CPP_ANCHOR = r"""
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

int main(int argc, char** argv) {
  const bool out_variant = argc > 1 && std::strcmp(argv[1], "out") == 0;
  const int calls = argc > 2 ? std::atoi(argv[2]) : 20000;
  const int reps = argc > 3 ? std::atoi(argv[3]) : 5;
  const auto opt = at::TensorOptions().device(at::kCUDA).dtype(at::kFloat);
  const at::Tensor a = at::rand({1}, opt), b = at::rand({1}, opt);
  at::Tensor out = at::empty({1}, opt);
  auto run = [&] {
    for (int i = 0; i < calls; ++i) {
      if (out_variant) {
        at::add_out(out, a, b);
      } else {
        at::Tensor c = at::add(a, b);
      }
    }
    at::cuda::device_synchronize();
  };
  run();
  std::vector<double> us;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    us.push_back(s / calls * 1e6);
  }
  std::sort(us.begin(), us.end());
  std::printf("%.4f\n", us[us.size() / 2]);
  return 0;
}
"""

_cpp_binary = None


def cpp_anchor_binary():
    """Builds CPP_ANCHOR once per torch installation (cached under the user's cache folder)."""
    global _cpp_binary
    if _cpp_binary is not None:
        return _cpp_binary
    import hashlib
    import os
    import subprocess
    from torch.utils import cpp_extension
    key = hashlib.sha1((CPP_ANCHOR + torch.__version__).encode()).hexdigest()[:12]
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                         "loom-anchor-gpu")
    os.makedirs(cache, exist_ok=True)
    binary = os.path.join(cache, "overhead-" + key)
    if not os.path.exists(binary):
        src = binary + ".cpp"
        with open(src, "w") as f:
            f.write(CPP_ANCHOR)
        abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
        cmd = ["g++", "-O2", "-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=%d" % abi, src, "-o",
               binary + ".tmp"]
        try:  # torch >= 2.6 names the device; older releases take cuda=True
            incs = cpp_extension.include_paths(device_type="cuda")
            libs = cpp_extension.library_paths(device_type="cuda")
        except TypeError:
            incs = cpp_extension.include_paths(cuda=True)
            libs = cpp_extension.library_paths(cuda=True)
        cmd += ["-I" + p for p in incs]
        cmd += ["-L" + p for p in libs] + ["-Wl,-rpath," + p for p in libs]
        # --no-as-needed: nothing names libtorch_cuda's symbols, yet its CUDA kernels must register
        cmd += ["-Wl,--no-as-needed", "-lc10", "-lc10_cuda", "-ltorch_cpu", "-ltorch_cuda",
                "-ltorch", "-Wl,--as-needed"]
        print("anchor: compiling the C++ overhead anchor against torch %s" % torch.__version__,
              file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("g++ could not build the C++ anchor: " + r.stderr[:2000])
        os.replace(binary + ".tmp", binary)
    _cpp_binary = binary
    return binary


def cpp_overhead(name, quick):
    import subprocess
    variant = "out" if name == "eager_add_out_overhead" else "add"
    calls, reps = (2000, 2) if quick else (20000, 5)
    r = subprocess.run([cpp_anchor_binary(), variant, str(calls), str(reps)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        raise RuntimeError("the C++ anchor failed: " + r.stderr[:1000])
    return float(r.stdout.split()[-1])


def device_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    pairs = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        pairs.append((start, end))
    pairs[-1][1].synchronize()  # the stream runs in order: every event has passed
    return statistics.median(s.elapsed_time(e) for s, e in pairs)


def set_tf32(allow):
    torch.backends.cuda.matmul.allow_tf32 = allow
    torch.backends.cudnn.allow_tf32 = allow


class Model:
    """`loom train`'s MLP or CNN (src/train/models.cpp), SGD momentum 0.9, lr 0.01, batch 128."""

    def __init__(self, cnn):
        nn = torch.nn
        torch.manual_seed(0)
        if cnn:
            self.net = nn.Sequential(
                nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
        else:
            self.net = nn.Sequential(
                nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                nn.Linear(128, 10))
        self.net.cuda()
        self.opt = torch.optim.SGD(self.net.parameters(), lr=0.01, momentum=0.9)
        self.x = torch.rand(STEP_BATCH, 1, 28, 28, device="cuda")
        self.y = torch.randint(0, 10, (STEP_BATCH,), device="cuda")

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(self.net(self.x), self.y)
        loss.backward()
        self.opt.step()


class Gpu:
    def __init__(self):
        self.t = {}  # tensors by row group, made when a row first runs
        self.last = {}  # this round's figures, for the _of_ rows

    def need(self, group):
        t = self.t
        if group in t:
            return t[group]
        dev = "cuda"
        if group == "big":
            t[group] = (torch.rand(N256M, device=dev), torch.rand(N256M, device=dev),
                        torch.empty(N256M, device=dev))
        elif group == "rows":
            t[group] = (torch.randn(ROWS, COLS, device=dev, requires_grad=True),
                        torch.randn(ROWS, COLS, device=dev),
                        torch.ones(COLS, device=dev, requires_grad=True),
                        torch.zeros(COLS, device=dev, requires_grad=True))
        elif group == "gemm":
            a, b = torch.randn(GEMM, GEMM, device=dev), torch.randn(GEMM, GEMM, device=dev)
            t[group] = (a, b, a.bfloat16(), b.bfloat16())
        elif group == "conv":
            t[group] = (torch.randn(64, 128, 56, 56, device=dev),
                        torch.randn(128, 128, 3, 3, device=dev))
        elif group == "pinned":
            t[group] = (torch.empty(IMAGE_BATCH).pin_memory(), torch.empty(IMAGE_BATCH, device=dev))
        elif group == "ring":  # the loader's host batches: pinned once, outside the timed loop
            t[group] = [torch.empty(IMAGE_BATCH).pin_memory() for _ in range(4)]
        elif group in ("mlp", "cnn"):
            t[group] = Model(group == "cnn")
        return t[group]

    def loader_gbps(self, batches):
        ring = self.need("ring")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for i in range(batches):
            y = ring[i % len(ring)].to("cuda", non_blocking=True)
            del y
        torch.cuda.synchronize()
        return ring[0].numel() * 4 * batches / (time.perf_counter() - t0) / 1e9

    def measure(self, name, quick):
        reps = 3 if quick else 10
        if name in ("eager_add_overhead", "eager_add_out_overhead"):
            return cpp_overhead(name, quick)
        if name == "eager_add_overhead_py":
            a, b = torch.rand(1, device="cuda"), torch.rand(1, device="cuda")
            calls = 2000 if quick else 20000

            def run():
                for _ in range(calls):
                    torch.add(a, b)
                torch.cuda.synchronize()
            run()
            times = []
            for _ in range(2 if quick else 5):
                t0 = time.perf_counter()
                run()
                times.append(time.perf_counter() - t0)
            return statistics.median(times) / calls * 1e6
        if name in ("copy_256m", "add_256m", "exp_256m", "sum_256m"):
            x, y, out = self.need("big")
            fn, traffic = {
                "copy_256m": (lambda: out.copy_(x), 2 * 4),
                "add_256m": (lambda: torch.add(x, y, out=out), 3 * 4),
                "exp_256m": (lambda: torch.exp(x, out=out), 2 * 4),
                "sum_256m": (lambda: torch.sum(x), 4),
            }[name]
            return traffic * N256M / (device_ms(fn, 2, reps) * 1e-3) / 1e9
        if name.endswith("_of_copy") or name == "h2d_loader_of_pinned":
            part, whole = ((name[:-len("_of_copy")], "copy_256m") if name.endswith("_of_copy")
                           else ("h2d_loader", "h2d_pinned_copy"))
            if part in self.last and whole in self.last:
                return self.last[part] / self.last[whole]
            return float("nan")
        if name in ("softmax_fwd_bwd", "layer_norm_fwd_bwd"):
            x, g, w, b = self.need("rows")
            if name == "softmax_fwd_bwd":
                def fn():
                    torch.autograd.grad(torch.softmax(x, -1), (x,), (g,))
            else:
                def fn():
                    y = F.layer_norm(x, (COLS,), w, b, 1e-5)
                    torch.autograd.grad(y, (x, w, b), (g,))
            return device_ms(fn, 2, reps)
        if name in ("gemm_bf16_8192", "gemm_tf32_8192"):
            a, b, a16, b16 = self.need("gemm")
            flop = 2.0 * GEMM ** 3
            if name == "gemm_bf16_8192":
                return flop / (device_ms(lambda: torch.mm(a16, b16), 3, reps) * 1e-3) / 1e12
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                return flop / (device_ms(lambda: torch.mm(a, b), 3, reps) * 1e-3) / 1e12
            finally:
                torch.backends.cuda.matmul.allow_tf32 = False
        if name == "conv2d_fwd":
            x, w = self.need("conv")
            return device_ms(lambda: F.conv2d(x, w, None, 1, 1), 3, reps)
        if name in ("mlp_step", "cnn_step"):
            model = self.need(name[:3])
            return device_ms(model.step, 5, 5 if quick else 20)
        if name == "h2d_pinned_copy":
            host, dev = self.need("pinned")
            ms = device_ms(lambda: dev.copy_(host, non_blocking=True), 2, reps)
            return host.numel() * 4 / (ms * 1e-3) / 1e9
        if name == "h2d_loader":
            batches = 6 if quick else 24
            self.loader_gbps(batches)  # warm-up, as loom's
            return statistics.median(self.loader_gbps(batches) for _ in range(2 if quick else 5))
        return float("nan")


def main():
    gpu = None
    usable = torch is not None and torch.cuda.is_available()
    if torch is None:
        print("anchor: torch is not installed for %s: every answer is nan" % sys.executable,
              file=sys.stderr)
    elif not usable:
        print("anchor: torch %s sees no CUDA device: every answer is nan" % torch.__version__,
              file=sys.stderr)
    else:
        set_tf32(False)
        torch.backends.cudnn.benchmark = False
        gpu = Gpu()
        print("anchor: torch %s on %s" % (torch.__version__, torch.cuda.get_device_name(0)),
              file=sys.stderr)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) < 3:
            continue
        name, threads, quick = parts[0], int(parts[1]), parts[2] == "1"
        value = float("nan")
        try:
            if gpu is not None:
                torch.set_num_threads(threads)
                value = gpu.measure(name, quick)
                gpu.last[name] = value
        except Exception as e:  # report, answer nan
            print("anchor: %s: %s" % (name, e), file=sys.stderr)
        if not math.isfinite(value):
            value = float("nan")
        print("%s %r" % (name, value), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        main()
    else:
        print("usage: loom-anchor-gpu serve gpu", file=sys.stderr)
        sys.exit(2)
