# torch.compile's figures for `loom bench compile`'s GPU rows, on the same GPU: the 7-operator
# pointwise chain over 256M float32 (effective GB/s from CUDA events, median of 10), the copy
# ceiling, and the host time per call of the compiled chain on 16 elements.
# Usage: python3 scripts/torch_compile_chain.py
import statistics
import time

import torch


def chain(x):
    a = torch.sigmoid(x * 1.5 + 0.5)
    return torch.exp(-(a * x)) + x


def device_ms(fn, reps=10):
    for _ in range(2):
        fn()
    ms = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ms.append(s.elapsed_time(e))
    return statistics.median(ms)


x = torch.randn(256 << 20, device="cuda")
out = torch.empty_like(x)
nbytes = 2 * 4 * x.numel()
compiled = torch.compile(chain)
t0 = time.time()
compiled(x)
torch.cuda.synchronize()
print(f"torch.compile first call (cold or warm cache): {time.time() - t0:.1f} s")
copy = nbytes / (device_ms(lambda: out.copy_(x)) * 1e-3) / 1e9
eager = nbytes / (device_ms(lambda: chain(x)) * 1e-3) / 1e9
comp = nbytes / (device_ms(lambda: compiled(x)) * 1e-3) / 1e9
print(f"copy_256m_gpu {copy:.0f} GB/s")
print(f"chain_256m_gpu_eager {eager:.0f} GB/s")
print(f"chain_256m_gpu_compiled {comp:.0f} GB/s ({comp / copy:.2f} of copy)")
tiny = torch.randn(16, device="cuda")
compiled(tiny)
compiled(tiny)
torch.cuda.synchronize()
n = 20000
t0 = time.perf_counter()
for _ in range(n):
    compiled(tiny)
torch.cuda.synchronize()
print(f"tiny_chain_gpu_compiled {(time.perf_counter() - t0) / n * 1e6:.1f} us/call")
