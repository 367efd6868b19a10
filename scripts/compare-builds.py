#!/usr/bin/env python3
"""Compares two builds of loom on one benchmark suite, in one run.

Runs `OLD/loom bench SUITE --json ...` and `NEW/loom bench SUITE --json ...` in turn (old, new, old,
new, ...) so that both see the same machine drift, then prints per measurement the median of each
side's loom figure, the ratio new/old (oriented so that > 1 is always worse) and the range of the
pairwise ratios, which is the noise to judge it against.

usage: scripts/compare-builds.py OLD_BUILD_DIR NEW_BUILD_DIR SUITE [--pairs N] [-- BENCH ARGS...]
example: scripts/compare-builds.py /tmp/old/build build core --pairs 3 -- --quick --anchor none
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(build, suite, extra, out):
    cmd = [os.path.join(build, "loom"), "bench", suite, "--json", out] + extra
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode not in (0, 3):
        sys.exit(f"compare-builds: {' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-2000:]}")
    with open(out) as f:
        doc = json.load(f)
    return {r["name"]: (r["loom"], r.get("better", "lower"), r.get("unit", "")) for r in doc["results"]}


def main(argv):
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    pairs = 3
    if "--pairs" in argv:
        i = argv.index("--pairs")
        pairs = int(argv[i + 1])
        del argv[i:i + 2]
    if len(argv) != 3 or pairs < 1:
        sys.exit(__doc__)
    old, new, suite = argv
    results = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        for p in range(pairs):
            for side, build in (("old", old), ("new", new)):
                results[side].append(run(build, suite, extra, os.path.join(tmp, f"{side}{p}.json")))
                print(f"pair {p + 1}/{pairs}: {side} done", file=sys.stderr)
    names = [n for n in results["new"][0] if all(n in r for r in results["old"] + results["new"])]
    print(f"suite {suite}: {pairs} pairs, old = {old}, new = {new}")
    print(f"{'measurement':48} {'unit':>8} {'old':>12} {'new':>12} {'new/old':>8}  pairwise range")
    worse, ratios = [], []
    for n in names:
        unit, better = results["new"][0][n][2], results["new"][0][n][1]
        o = [r[n][0] for r in results["old"]]
        w = [r[n][0] for r in results["new"]]
        if any(v is None or v <= 0 for v in o + w):
            continue
        # Oriented so that > 1 means new is worse.
        ratio = (lambda a, b: a / b) if better == "lower" else (lambda a, b: b / a)
        med = ratio(statistics.median(w), statistics.median(o))
        pair = sorted(ratio(a, b) for a, b in zip(w, o))
        print(f"{n[:48]:48} {unit:>8} {statistics.median(o):12.4g} {statistics.median(w):12.4g} "
              f"{med:8.3f}  {pair[0]:.3f}-{pair[-1]:.3f}")
        ratios.append(med)
        if pair[0] > 1.0:
            worse.append(n)
    if ratios:
        print(f"geometric mean new/old (> 1 is worse): {statistics.geometric_mean(ratios):.3f} "
              f"over {len(ratios)} measurements")
    print("worse in every pair: " + (", ".join(worse) if worse else "none"))


if __name__ == "__main__":
    main(sys.argv[1:])
