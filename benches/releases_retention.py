#!/usr/bin/env python3
"""Benchmark: what retention adds to a publication into a destination with `releases`
(SPEC §15), old binary against new, in alternating pairs.

Each timed run publishes a third version (1% more of 10,000 x 4 KiB files in 100
directories changed) over a fresh destination that holds two releases: with `keep: 0`
retention prunes the first release (10,000 files), with `keep: 3` it prunes nothing. The
difference of the medians is the cost of pruning inside the publication.

    python3 benches/releases_retention.py --old OLD_BIN --new NEW_BIN [--reps 5]

Scratch data goes to target/bench-retention (BENCH_DIR overrides).
"""
import argparse
import os
import shutil
import subprocess
import time


def make_bundle(d, n, version, changed):
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        sub = f"{d}/d{i % 100:02}"
        os.makedirs(sub, exist_ok=True)
        text = f"v{version}" if i < changed else "v0"
        with open(f"{sub}/f{i}.txt", "w") as f:
            f.write((text * 2048)[:4096])


def once(binary, work, keep, tag):
    root = f"{work}/r-{tag}"
    if os.path.exists(root):
        shutil.rmtree(root)
    os.makedirs(root)
    cfg = f"{root}/c.yaml"
    with open(cfg, "w") as f:
        f.write(
            "version: 1\npipeline:\n  id: p\ndestinations:\n  - id: site\n"
            f"    path: {root}/site\n    releases:\n      keep: {keep}\n"
        )
    env = dict(os.environ, DISTRIBUTOR_JOURNAL=f"{root}/j.sqlite3")
    for v in (0, 1):
        subprocess.run([binary, "publish", "--config", cfg, "--source", f"{work}/b{v}"],
                       check=True, env=env, stdout=subprocess.DEVNULL)
    subprocess.run(["sync"], check=True)
    t = time.perf_counter()
    subprocess.run([binary, "publish", "--config", cfg, "--source", f"{work}/b2"],
                   check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old", required=True)
    ap.add_argument("--new", required=True)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    work = os.path.abspath(os.environ.get("BENCH_DIR", "target/bench-retention"))
    if os.path.exists(work):
        shutil.rmtree(work)
    os.makedirs(work)
    for v in range(3):
        make_bundle(f"{work}/b{v}", 10000, v, 100 * v)
        subprocess.run([a.new, "manifest", f"{work}/b{v}", "--id", "site",
                        "--created-at", f"2026-12-02T0{v}:00:00Z"],
                       check=True, stdout=subprocess.DEVNULL)
    times = {}
    for _ in range(a.reps):
        for binary, name in ((a.old, "old"), (a.new, "new")):
            for keep in (0, 3):
                key = f"{name} keep {keep}"
                times.setdefault(key, []).append(once(binary, work, keep, f"{name}-{keep}"))
    print(f"load average at the end: {os.getloadavg()}")
    for key, v in times.items():
        v = sorted(v)
        print(f"{key}: median {v[len(v) // 2]:.3f} s; " + " ".join(f"{x:.3f}" for x in v))


if __name__ == "__main__":
    main()
