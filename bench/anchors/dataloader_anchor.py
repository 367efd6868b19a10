#!/usr/bin/python3
# Anchor for `loom bench data`: PyTorch's DataLoader (Debian python3-torch) on Fashion-MNIST with the
# same per-sample transforms and batch size as loom's loader. Speaks the bench driver's protocol:
# reads "NAME THREADS QUICK" lines, answers "NAME VALUE" ("NAME nan" for names it does not know).
#
# Transforms per sample, as torchvision's RandomCrop(28, padding=2) + RandomHorizontalFlip() +
# ToTensor() + Normalize((0.2860,), (0.3530,)) compute them, written with torch ops because
# torchvision is not packaged here: zero-pad the image, take a random 28x28 window, flip it with
# probability 1/2, scale to [0, 1] and normalise.
import gzip
import os
import sys
import time

try:
    import torch
    from torch.utils.data import DataLoader, Dataset
except ImportError:  # answer nan to everything
    torch = None

MEAN, STD = 0.2860, 0.3530
BATCH = 128


def read_idx(path):
    opener = gzip.open if os.path.exists(path + ".gz") and not os.path.exists(path) else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


if torch is not None:
    class FashionMNIST(Dataset):
        def __init__(self, root):
            self.images = read_idx(os.path.join(root, "train-images-idx3-ubyte"))
            self.labels = read_idx(os.path.join(root, "train-labels-idx1-ubyte")).long()

        def __len__(self):
            return self.images.shape[0]

        def __getitem__(self, i):
            x = torch.nn.functional.pad(self.images[i].unsqueeze(0).float(), (2, 2, 2, 2))
            top, left = torch.randint(0, 5, (2,)).tolist()
            x = x[:, top:top + 28, left:left + 28]
            if torch.rand(1).item() < 0.5:
                x = x.flip(-1)
            x = (x / 255.0 - MEAN) / STD
            return x, self.labels[i]


def measure(ds, workers, quick):
    """samples/s over one epoch (a fifth of one when quick), workers already started."""
    n = len(ds) // (5 if quick else 1)
    sub = torch.utils.data.Subset(ds, range(n)) if quick else ds
    extra = {"persistent_workers": True, "prefetch_factor": 2} if workers > 0 else {}
    loader = DataLoader(sub, batch_size=BATCH, shuffle=True, num_workers=workers, **extra)
    it = iter(loader)  # start the workers outside the timed region, as loom's are
    next(it)
    t0 = time.perf_counter()
    seen = 0
    for x, y in it:
        seen += x.shape[0]
    return seen / (time.perf_counter() - t0)


def main():
    root = os.environ.get("LOOM_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    ds = None
    for line in sys.stdin:
        parts = line.split()
        if len(parts) < 3:
            continue
        name, threads, quick = parts[0], int(parts[1]), parts[2] == "1"
        value = float("nan")
        try:
            if torch is not None and name.startswith("loader_w"):
                torch.set_num_threads(threads)
                if ds is None:
                    ds = FashionMNIST(root)
                value = measure(ds, int(name[len("loader_w"):]), quick)
        except Exception as e:  # report, answer nan
            print("anchor: %s: %s" % (name, e), file=sys.stderr)
        print("%s %r" % (name, value), flush=True)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "serve":
        main()
    else:
        print("usage: loom-anchor-dataloader serve data", file=sys.stderr)
        sys.exit(2)
