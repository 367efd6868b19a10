#!/usr/bin/env python3
# Anchor for `loom bench gpt`: PyTorch's side of every row of bench/gpt_suite.cpp (Note [gpt suite]
# there: same models, sizes, optimizer, precision, units and FLOP formulas). On the GPU machine
# python3 has torch 2.11 with CUDA; without a GPU the gpt_tiny_* and attn_cpu_* rows run on the
# CPU (torch 1.13 has no torch.compile: the compiled rows answer nan; no
# F.scaled_dot_product_attention: attention is written out, as loom's reference). Speaks the bench
# driver's protocol: reads "NAME THREADS QUICK" lines, answers "NAME VALUE" ("NAME nan" for names
# it does not know and where torch or a CUDA device is missing).
import math
import os
import re
import statistics
import sys
import tempfile
import time

# Cold compiles (gpt_*_compile_s): empty inductor and Triton caches, set before torch loads.
_cache = tempfile.mkdtemp(prefix="loom-anchor-gpt-")
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_cache, "inductor"))
os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(_cache, "triton"))

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
except ImportError:
    # The python3 on PATH may lack torch where Debian's has it (python3-torch, the CPU rows'
    # anchor): run this script with that one instead, else answer nan to everything.
    debian = "/usr/bin/python3"
    if os.path.exists(debian) and os.path.realpath(sys.executable) != os.path.realpath(debian) \
            and os.environ.get("GPT_ANCHOR_REEXEC") != "1":
        os.environ["GPT_ANCHOR_REEXEC"] = "1"
        os.execv(debian, [debian] + sys.argv)
    torch = None

H100_BF16_PEAK = 989e12
HAS_SDPA = torch is not None and hasattr(F, "scaled_dot_product_attention")


def causal_attention(q, k, v):
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return att.masked_fill(mask, float("-inf")).softmax(-1) @ v


if torch is not None:
    class Block(nn.Module):
        def __init__(self, c, h):
            super().__init__()
            self.h = h
            self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
            self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
            self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
            q, k, v = (a.view(b, t, self.h, c // self.h).transpose(1, 2) for a in (q, k, v))
            y = causal_attention(q, k, v).transpose(1, 2).contiguous().view(b, t, c)
            x = x + self.c_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class Gpt(nn.Module):
        def __init__(self, layers, heads, width, vocab, block):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
            self.h = nn.ModuleList(Block(width, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            for p in self.parameters():
                if p.dim() >= 2:
                    nn.init.normal_(p, 0.0, 0.02)

        def forward(self, idx, targets):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.h:
                x = b(x)
            logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
            return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))

        def flops_per_token(self, t):  # 6 N + 12 L C T, N without the position embedding
            n = sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()
            return 6.0 * n + 12.0 * len(self.h) * self.wte.weight.shape[1] * t

# name prefix -> (layers, heads, width, vocab, batch, seq, on the GPU)
CONFIGS = {
    "gpt_small4": (4, 12, 768, 50304, 8, 1024, True),
    "gpt2_small": (12, 12, 768, 50304, 8, 1024, True),
    "gpt_tiny": (2, 2, 64, 512, 4, 64, False),
}


class Run:
    """A model, AdamW and one batch: tokens/s of training steps (Note [gpt suite])."""

    def __init__(self, cfg, compiled):
        layers, heads, width, vocab, self.batch, self.seq, self.gpu = cfg
        dev = "cuda" if self.gpu else "cpu"
        torch.manual_seed(0)
        self.model = Gpt(layers, heads, width, vocab, self.seq).to(dev)
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=6e-4, betas=(0.9, 0.95),
                                     weight_decay=0.1)
        w = torch.randint(0, vocab, (self.batch, self.seq + 1), device=dev)
        self.x, self.y = w[:, :-1].contiguous(), w[:, 1:].contiguous()
        self.fn = self.model
        self.first_call_s = float("nan")
        if compiled:
            if not hasattr(torch, "compile"):
                raise RuntimeError("torch %s has no torch.compile" % torch.__version__)
            self.fn = torch.compile(self.model)
            t0 = time.perf_counter()
            self.step()
            self.sync()
            self.first_call_s = time.perf_counter() - t0
        for _ in range(2):
            self.step()
        self.sync()

    def sync(self):
        if self.gpu:
            torch.cuda.synchronize()

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        if self.gpu:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = self.fn(self.x, self.y)
        else:
            loss = self.fn(self.x, self.y)
        loss.backward()
        self.opt.step()

    def tokens_per_second(self, steps):
        self.sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            self.step()
        self.sync()
        return self.batch * self.seq * steps / (time.perf_counter() - t0)


class Attention:
    def __init__(self, b, h, t, d, gpu):
        self.gpu = gpu
        g = torch.Generator().manual_seed(1)
        def make():
            r = torch.randn(b, h, t, d, generator=g)
            return r.to("cuda", torch.bfloat16) if gpu else r
        self.q, self.k, self.v, self.dout = make(), make(), make(), make()
        for a in (self.q, self.k, self.v):
            a.requires_grad_()
        self.flops = 3.5 * 2.0 * b * h * t * t * d

    def run(self):
        out = causal_attention(self.q, self.k, self.v)
        torch.autograd.grad(out, (self.q, self.k, self.v), self.dout)

    def tflops(self, quick):
        reps = 3 if quick else 10
        for _ in range(2):
            self.run()
        times = []
        for _ in range(reps):
            if self.gpu:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                self.run()
                end.record()
                end.synchronize()
                times.append(start.elapsed_time(end) * 1e-3)
            else:
                t0 = time.perf_counter()
                self.run()
                times.append(time.perf_counter() - t0)
        return self.flops / statistics.median(times) / 1e12


class Anchor:
    def __init__(self):
        self.runs = {}

    def run(self, prefix, compiled):
        key = (prefix, compiled)
        if key not in self.runs:
            self.runs[key] = Run(CONFIGS[prefix], compiled)
        return self.runs[key]

    def measure(self, name, quick):
        m = re.match(r"^(attn|attn_cpu)_b(\d+)_h(\d+)_t(\d+)_d(\d+)$", name)
        if m:
            gpu = m.group(1) == "attn"
            if gpu and not torch.cuda.is_available():
                return float("nan")
            key = ("attn", name)
            if key not in self.runs:
                self.runs[key] = Attention(*(int(m.group(i)) for i in range(2, 6)), gpu)
            return self.runs[key].tflops(quick)
        for prefix, cfg in CONFIGS.items():
            if not name.startswith(prefix + "_"):
                continue
            if cfg[6] and not torch.cuda.is_available():
                return float("nan")
            steps = 2 if quick else (10 if cfg[6] else 5)
            what = name[len(prefix) + 1:]
            if what == "eager_tok_s" or what == "tok_s":
                return self.run(prefix, False).tokens_per_second(steps)
            if what == "compiled_tok_s":
                return self.run(prefix, True).tokens_per_second(steps)
            if what == "compile_s":
                return self.run(prefix, True).first_call_s
            if what == "mfu":
                gpu_name = torch.cuda.get_device_name(0)
                if "H100" not in gpu_name and "H200" not in gpu_name:
                    return float("nan")
                r = self.run(prefix, False)
                return 100.0 * r.tokens_per_second(steps) * r.model.flops_per_token(r.seq) / \
                    H100_BF16_PEAK
        return float("nan")


def main():
    anchor = None
    if torch is None:
        print("anchor: torch is not installed for %s: every answer is nan" % sys.executable,
              file=sys.stderr)
    else:
        anchor = Anchor()
        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False  # loom's default
            torch.backends.cudnn.allow_tf32 = False
            where = torch.cuda.get_device_name(0)
        else:
            where = "the CPU"
        print("anchor: torch %s on %s; attention: %s" %
              (torch.__version__, where,
               "F.scaled_dot_product_attention(is_causal=True)" if HAS_SDPA else
               "written out (this torch has no scaled_dot_product_attention)"), file=sys.stderr)
    for line in sys.stdin:
        parts = line.split()
        if len(parts) < 3:
            continue
        name, threads, quick = parts[0], int(parts[1]), parts[2] == "1"
        value = float("nan")
        try:
            if anchor is not None:
                torch.set_num_threads(threads)
                value = anchor.measure(name, quick)
        except Exception as e:  # report, answer nan
            print("anchor: %s: %s" % (name, e), file=sys.stderr)
        if not math.isfinite(value):
            value = float("nan")
        print("%s %r" % (name, value), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        main()
    else:
        print("usage: loom-anchor-gpt serve gpt", file=sys.stderr)
        sys.exit(2)
