#!/usr/bin/env python3
"""Benchmark (the scale issue, item 3): deciding that a large shared-root publication is
unchanged, against its floor, in one alternating run.

A shared_root destination holds N files (default 100,000 small files, 100 per
directory) of one owner, published once (untimed). Then each round runs, in rotating
order:

- `floor`: `examples/floor.rs` without a journal: parsing and checking the manifest and
  taking its digest, reading and parsing the state (paths only) and `lstat`ing every
  source and destination file, on one thread (the floor of the state-reading path; with
  the journal as a third argument it is the floor of the path that skips the state);
- `publish`: `distributor publish` of the same bundle (decision `unchanged`: the journal's
  placement fingerprints vouch for every file, nothing is hashed or written);
- `plan`: `distributor plan` of the same bundle (the dry run; the journal read only).

Goal (issue 16, item 3): planning at most 3x the floor. Reports medians and the median of
the per-round ratios.

    cargo build --release --example floor   # and the binary
    python3 benches/plan_scale.py --bin target/release/distributor \\
        --floor target/release/examples/floor [--files 100000] [--reps 7]

Scratch data goes to target/bench-plan-scale (BENCH_DIR overrides).
"""
import argparse
import os
import shutil
import statistics
import subprocess
import time


def run(cmd, env):
    t = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--floor", required=True)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    work = os.path.abspath(os.environ.get("BENCH_DIR", "target/bench-plan-scale"))
    if os.path.exists(work):
        shutil.rmtree(work)
    src, dest = f"{work}/b", f"{work}/d"
    for i in range(a.files):
        d = f"{src}/d{i // 100:05}"
        if i % 100 == 0:
            os.makedirs(d)
        with open(f"{d}/f{i}.txt", "w") as f:
            f.write(f"file {i}\n")
    subprocess.run([a.bin, "manifest", src, "--id", "site", "--created-at",
                    "2026-12-02T00:00:00Z"], check=True, stdout=subprocess.DEVNULL)
    cfg = f"{work}/c.yaml"
    with open(cfg, "w") as f:
        f.write("version: 1\npipeline:\n  id: p\ndestinations:\n  - id: site\n"
                f"    path: {dest}\n    state:\n      mode: shared_root\n")
    env = dict(os.environ, DISTRIBUTOR_JOURNAL=f"{work}/j.sqlite3")
    pub = [a.bin, "publish", "--config", cfg, "--source", src, "--quiet"]
    subprocess.run(pub, check=True, env=env, stdout=subprocess.DEVNULL)
    variants = {
        "floor": [a.floor, src, dest],
        "publish": pub,
        "plan": [a.bin, "plan", "--config", cfg, "--source", src, "--quiet"],
    }
    names = list(variants)
    times = {n: [] for n in names}
    load = [os.getloadavg()[0]]
    for r in range(a.reps):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            times[n].append(run(variants[n], env))
        load.append(os.getloadavg()[0])
    med = {n: statistics.median(v) for n, v in times.items()}
    ratio = lambda n: statistics.median(
        [x / f for x, f in zip(times[n], times["floor"])])
    print(f"{a.files} files, {a.reps} rounds, load {min(load):.1f}-{max(load):.1f}")
    print("| variant | median | vs floor (per round) |")
    print("|---|---|---|")
    for n in names:
        print(f"| {n} | {med[n]:.3f} s | {med[n] / med['floor']:.2f}x ({ratio(n):.2f}x) |")


if __name__ == "__main__":
    main()
