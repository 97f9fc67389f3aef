#!/usr/bin/env python3
"""A/B comparison of two distributor builds on scenario (b) of benches/publish.py: the
republication of 10,000 unchanged files of 4 KiB in 100 folders.

    python3 benches/ab.py OLD_BINARY NEW_BINARY [--runs 41] [--work target/bench-ab]

A change to the engine's speed is a few milliseconds out of 60-80, on a shared machine
whose noise is tens of percent between minutes; a before/after pair of benchmark runs
cannot show it. Here both builds publish the same bundle to destinations of their own,
alternating run by run (the order flips every round), and the medians come from the same
minutes.

Every run is started the way benches/publish.py starts distributor (and most callers do):
from a process that itself just started, so that caches are as cold as in real use. Timing
runs one after another from one long-lived process instead favours work that overlaps on
several threads: such a change once looked 4 ms faster that way and was 10 ms slower
started fresh (docs/performance.md).
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from publish import T0, tree_files, write_bundle  # noqa: E402

RUN = """
import subprocess, sys, time
t = time.perf_counter()
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
if r.returncode != 0:
    sys.exit(r.stderr.decode() or f"exit {r.returncode}")
print(time.perf_counter() - t)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=41)
    ap.add_argument("--work", default="target/bench-ab")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    src = write_bundle(os.path.join(a.work, "bundle"), tree_files(10_000, 100, 4096), "ab", T0)
    cmds = {}
    for tag, binary in (("old", a.old), ("new", a.new)):
        run = os.path.join(a.work, tag)
        os.makedirs(run)
        cfg = os.path.join(run, "config.yaml")
        with open(cfg, "w") as f:
            f.write(f"version: 1\npipeline:\n  id: ab\ndestinations:\n  - id: dest\n"
                    f"    path: {os.path.join(run, 'dst')}\n")
        cmds[tag] = [os.path.abspath(binary), "publish", "--json", "--config", cfg,
                     "--source", src, "--journal", os.path.join(run, "journal.sqlite3")]
        subprocess.run(cmds[tag], check=True, stdout=subprocess.DEVNULL)  # create
    times = {"old": [], "new": []}
    for i in range(a.runs):
        for tag in ("old", "new") if i % 2 == 0 else ("new", "old"):
            subprocess.run(["sync"], check=True)
            out = subprocess.run([sys.executable, "-c", RUN] + cmds[tag],
                                 check=True, capture_output=True, text=True).stdout
            times[tag].append(float(out) * 1000)
    for tag in ("old", "new"):
        v = sorted(times[tag])
        print(f"{tag}  median {statistics.median(v):6.1f} ms  p25 {v[len(v) // 4]:6.1f}  "
              f"min {v[0]:6.1f}  ({getattr(a, tag)})")
    ratio = statistics.median(times["new"]) / statistics.median(times["old"])
    print(f"new/old {ratio:.3f}")
    shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
