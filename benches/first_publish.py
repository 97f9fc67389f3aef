#!/usr/bin/env python3
"""First publication, side by side, with CPU time (issue 28).

Each round publishes the same bundle once with every tool, each into a fresh directory
(and a fresh --journal for distributor builds), the order rotated every round, an untimed
`sync` before each run and nothing deleted until the end. Tools: one or more distributor
builds (`--tool NAME=BINARY`) and `rsync -a --delete` followed by `sync -f` (the timed
region holds both). For every run it prints the wall time and the CPU time (user + system
of the processes, from wait4) and the load average; at the end the medians and the ratios
of the medians and per round. On a shared machine the CPU ratio is the steadier figure:
wall time there is mostly waiting for a core. With `--floor BINARY` the first-publication
floor program (examples/floor_first.rs: the work any publication must do, without
distributor's planning, report and checks) runs as one more tool, "floor", in the same
rounds.

    python3 benches/first_publish.py --work /tmp/fp --files 10000 --dirs 100 --size 4096 \
        --reps 5 --tool new=target/release/distributor --tool old=/path/to/old/distributor \
        --floor target/release/examples/floor_first
"""
import os, sys, json, time, subprocess, statistics, argparse, shutil
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import publish as P

ap = argparse.ArgumentParser()
ap.add_argument("--work", required=True)
ap.add_argument("--files", type=int, default=10000)
ap.add_argument("--dirs", type=int, default=100)
ap.add_argument("--size", type=int, default=4096)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--tool", action="append", default=[], help="name=binary")
ap.add_argument("--no-rsync", action="store_true")
ap.add_argument("--floor", help="the first-publication floor program (examples/floor_first.rs), timed as a tool of its own")
ap.add_argument("--keep", action="store_true", help="keep the run directories")
a = ap.parse_args()

src = os.path.join(a.work, f"src-{a.files}-{a.size}")
if not os.path.exists(os.path.join(src, "distributor-manifest.json")):
    P.write_bundle(src, P.tree_files(a.files, a.dirs, a.size), "bench", P.T0)
runs = os.path.join(a.work, "runs")
os.makedirs(runs, exist_ok=True)
tools = dict(t.split("=", 1) for t in a.tool)
names = list(tools) + ([] if a.no_rsync else ["rsync"]) + (["floor"] if a.floor else [])

def run(cmds):
    t0 = time.perf_counter(); cpu = 0.0
    for c in cmds:
        p = subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, st, ru = os.wait4(p.pid, 0)
        err = p.stderr.read(); p.stderr.close()
        if os.waitstatus_to_exitcode(st) != 0:
            raise SystemExit(f"{c} failed: {err.decode()}")
        cpu += ru.ru_utime + ru.ru_stime
    return time.perf_counter() - t0, cpu

res = {n: [] for n in names}
n = 0
def load(): return os.getloadavg()[0]
print(f"load at start {load():.2f}", flush=True)
for r in range(a.reps):
    k = r % len(names)
    for t in names[k:] + names[:k]:
        n += 1
        d = os.path.join(runs, f"{t}-{n}")
        os.makedirs(d)
        dst = os.path.join(d, "dst")
        if t == "rsync":
            os.makedirs(dst)
            cmds = [["rsync", "-a", "--delete", src + "/", dst + "/"], ["sync", "-f", dst]]
        elif t == "floor":
            cmds = [[a.floor, src, dst, os.path.join(d, "j.sqlite3")]]
        else:
            cfg = os.path.join(d, "cfg.yaml")
            open(cfg, "w").write(f"version: 1\npipeline:\n  id: bench\ndestinations:\n  - id: dest\n    path: {dst}\n    state:\n      mode: single_owner\n")
            cmds = [[tools[t], "publish", "--json", "--config", cfg, "--source", src, "--journal", os.path.join(d, "j.sqlite3")]]
        subprocess.run(["sync"])
        w, c = run(cmds)
        res[t].append((w, c))
        print(f"  r{r} {t:10} wall {w:7.3f} cpu {c:7.3f}  load {load():.2f}", flush=True)
print(f"load at end {load():.2f}")
med = lambda v: statistics.median(v)
for t in names:
    W = med([x[0] for x in res[t]]); C = med([x[1] for x in res[t]])
    s = f"{t:10} wall {W:7.3f} s  cpu {C:7.3f} s"
    for o in names:
        if o == t: continue
        rw = [x[0] / y[0] for x, y in zip(res[t], res[o])]
        rc = [x[1] / y[1] for x, y in zip(res[t], res[o])]
        s += f" | /{o} wall {W/med([y[0] for y in res[o]]):.2f}x (per round {med(rw):.2f}x) cpu {C/med([y[1] for y in res[o]]):.2f}x"
    print(s)
json.dump(res, open(os.path.join(a.work, f"res-{int(time.time())}.json"), "w"))
if not a.keep:
    shutil.rmtree(runs, ignore_errors=True)
