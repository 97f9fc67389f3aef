#!/usr/bin/env python3
"""Side-by-side benchmark: `distributor publish` against `rsync -a --delete` + `sync -f`
and `cp -a` + `sync -f` (issue 6). Run through benches/publish.sh, which builds the
release binary first.

Every scenario runs each tool several times, alternating the tools (the order rotates each
round), and reports medians. With --baseline OLD_BINARY a second distributor build (say,
of the commit before a change) runs as one more tool, "baseline", in the same rounds and
on the same kind of fresh trees (its own destination and journal every run, like every
other tool), and the table adds its medians, its ratios and distributor/baseline. Both sides are made durable: distributor syncs before its
commit point, rsync and cp are followed by `sync -f` on the destination, inside the timed
region. An untimed global `sync` before every timed run keeps one run's dirty pages (or
the setup's) from being charged to the next.

Scenarios:
  a  first publish of 10,000 files of 4 KiB in 100 folders
  b  republish of the same bundle (nothing changed)
  c  1% of the files changed (new bundle, newer created_at)
  d  4 files of 64 MiB
  e  plan --json of one owner in a shared root holding 100,000 outputs of 20 owners
     (time and peak RSS)
  f  first publish of 100,000 outputs (time and peak RSS); prints the journal's bytes per
     file and the JSON report's size after it
  g  republish of f's bundle, nothing changed (time and peak RSS)
  h  republish of a small bundle, 1,000 files of 4 KiB in 10 folders, nothing changed:
     the fixed cost of a run (process start, journal, threads) weighs most here; also
     timed, with --floor, the floor program examples/floor.rs (parse, check and digest the
     manifest, lstat every source file, read the state file's identity and the placement
     set from distributor's journal, lstat every placed file), as a tool of its own in the
     same rounds

With --floor-first, the first publications (a) and (f) also time the first-publication
floor program examples/floor_first.rs (parse, check and digest the manifest, lstat every
source file, journal the operation and a row per file in SQLite, stage every file into
.distributor/staging/<op>/new/ hashing it, syncfs, rename each into place, syncfs, write
and rename the state file), as a tool of its own in the same rounds.

--million sets f and g to 1,000,000 outputs in 10,000 directories, one run per tool in f
and --reps in g (the
scale issue's goals: first publish <= 1.0x rsync+sync in <= 512 MiB, unchanged
republish <= 0.5x rsync in <= 256 MiB). It takes about 15 minutes and 10 GB of disk:
  benches/publish.sh --million --only fg
Its floor (lstat of every file, reading the manifest and the state) is
benches/plan_scale.py --files 1000000.
"""

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

FULL = dict(a_files=10_000, a_dirs=100, a_size=4096, d_files=4, d_size=64 << 20,
            e_owners=20, e_files=5_000, f_files=100_000, f_dirs=1_000, f_size=256,
            h_files=1_000, h_dirs=10, reps=5, reps_big=2)
QUICK = dict(a_files=1_000, a_dirs=10, a_size=4096, d_files=4, d_size=4 << 20,
             e_owners=4, e_files=500, f_files=5_000, f_dirs=50, f_size=256,
             h_files=1_000, h_dirs=10, reps=3, reps_big=2)

T0 = "2026-12-02T06:00:00Z"
T1 = "2026-12-02T07:00:00Z"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- bundles

def write_bundle(root, files, bundle_id, created_at):
    """files: list of (rel, bytes). Writes them and the manifest; returns root."""
    os.makedirs(root, exist_ok=True)
    outputs = []
    made = set()
    for rel, data in files:
        d = os.path.dirname(rel)
        if d and d not in made:
            os.makedirs(os.path.join(root, d), exist_ok=True)
            made.add(d)
        with open(os.path.join(root, rel), "wb") as f:
            f.write(data)
        outputs.append({"path": rel, "size": len(data),
                        "sha256": hashlib.sha256(data).hexdigest()})
    write_manifest(root, bundle_id, created_at, outputs)
    return root


def write_manifest(root, bundle_id, created_at, outputs):
    m = {"manifest_version": 1, "id": bundle_id, "created_at": created_at,
         "outputs": outputs}
    with open(os.path.join(root, "distributor-manifest.json"), "w") as f:
        json.dump(m, f)


def tree_files(n, dirs, size, prefix=""):
    per = max(1, n // dirs)
    return [(f"{prefix}d{i // per:04d}/f{i:06d}.bin", os.urandom(size)) for i in range(n)]


def changed_copy(src, dst, fraction, bundle_id, created_at):
    """cp -a of src, then `fraction` of the files rewritten with new random bytes."""
    shutil.copytree(src, dst, symlinks=True)  # copy2: keeps mtimes, as cp -a does
    with open(os.path.join(src, "distributor-manifest.json")) as f:
        outputs = json.load(f)["outputs"]
    step = max(1, round(1 / fraction))
    for i in range(0, len(outputs), step):
        o = outputs[i]
        data = os.urandom(o["size"])
        with open(os.path.join(dst, o["path"]), "wb") as f:
            f.write(data)
        o["sha256"] = hashlib.sha256(data).hexdigest()
    write_manifest(dst, bundle_id, created_at, outputs)
    return dst


# ---------------------------------------------------------------- running

def timed(cmds):
    """Runs commands in sequence, each checked; returns the seconds they took together."""
    start = time.perf_counter()
    for cmd in cmds:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr.decode()}")
    return time.perf_counter() - start


# Runs a command and reports its wall time and peak RSS. Linux carries a process's peak
# RSS across fork and exec, so a child started from this (large) interpreter would report at
# least the interpreter's size; a small helper process starts the command instead. It
# starts it with posix_spawn (vfork and exec), not os.fork: forking the helper's
# interpreter and running its after-fork handlers in the child took about 3 ms of every
# timed run (/bin/true: 5.0-5.1 ms through a forking helper, 2.3-3.7 ms through this one,
# 1.2-1.8 ms through subprocess.run, at load 6-8), which a 1,000-file republication (about
# 10 ms) cannot hide.
# Whatever is compared with distributor's runs in a ratio (the floor) is timed through the
# same helper, so both carry the same overhead.
RSS_HELPER = """
import os, sys, time
out = sys.argv[1]
t = time.perf_counter()
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, ru = os.wait4(pid, 0)
secs = time.perf_counter() - t
with open(out, "w") as f:
    f.write(f"{secs} {ru.ru_maxrss} {os.waitstatus_to_exitcode(status)}")
"""


def timed_rss(cmd):
    """Runs one command; returns (seconds, peak RSS KiB, stdout)."""
    errf = tempfile.TemporaryFile()
    with tempfile.NamedTemporaryFile("r", suffix=".bench") as res:
        p = subprocess.Popen([sys.executable, "-c", RSS_HELPER, res.name] + cmd,
                             stdout=subprocess.PIPE, stderr=errf)
        out, _ = p.communicate()
        secs, rss, code = res.read().split()
    if p.returncode != 0 or int(code) != 0:
        errf.seek(0)
        raise SystemExit(f"{' '.join(cmd)} exited {code}:\n{errf.read().decode()}")
    return float(secs), int(rss), out


def settle():
    subprocess.run(["sync"], check=True)


class Bench:
    def __init__(self, bins, work, sizes, cool):
        # Label -> binary: "distributor", and "baseline" when one is compared.
        self.bins = bins
        self.dists = list(bins)
        self.work = work
        self.s = sizes
        self.n = 0
        self.cool = cool
        self.recent = 0 if cool < 6 else 6
        self.trash = []

    def discard(self, run):
        """Deleting many files right before a timed run slows the run's file creation
        (ext4 skips recently freed inodes, scanning for others), so run directories are
        kept until the scenario ends, then deleted together while nothing is timed."""
        self.trash.append(run)

    def settle_after_deletes(self):
        """Syncs, then (full runs) waits 6 s. Without a journal, ext4 skips inodes freed in
        the last 60 s when it allocates one (360 s while their inode table block is dirty;
        Linux's RECENTCY_MIN and RECENTCY_DIRTY), scanning past each from the start of the
        group every time, so files created right after many deletions cost more than in
        steady use. The window is too long to wait out between runs; the sync makes the
        60 s apply, and rotating the tools' order every round spreads what is left of it
        over all of them (see docs/performance.md, the filesystem)."""
        settle()
        time.sleep(self.recent)

    def empty_trash(self):
        for d in self.trash:
            rm(d)
        self.trash.clear()
        settle()
        time.sleep(self.cool)

    def fresh(self, tag):
        self.n += 1
        d = os.path.join(self.work, "runs", f"{tag}-{self.n}")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        return d

    def config(self, run, dest, pipeline="bench", mode="single_owner"):
        path = os.path.join(run, f"config-{pipeline}.yaml")
        with open(path, "w") as f:
            f.write(f"version: 1\npipeline:\n  id: {pipeline}\ndestinations:\n"
                    f"  - id: dest\n    path: {dest}\n    state:\n      mode: {mode}\n")
        return path

    def dist_cmd(self, run, cfg, src, command="publish", tool="distributor"):
        return [self.bins[tool], command, "--json", "--config", cfg, "--source", src,
                "--journal", os.path.join(run, "journal.sqlite3")]

    def publish(self, run, cfg, src, expect=None, command="publish", tool="distributor"):
        secs, rss, out = timed_rss(self.dist_cmd(run, cfg, src, command, tool))
        rep = json.loads(out)
        if expect:
            got = rep["destinations"][0]["decision"]
            if got != expect:
                raise SystemExit(f"{tool}: expected decision {expect}, got {got}: {rep['destinations'][0]['message']}")
        return secs, rss

    @staticmethod
    def rsync(src, dst):
        return [["rsync", "-a", "--delete", src + "/", dst + "/"], ["sync", "-f", dst]]

    @staticmethod
    def cp(src, dst):
        return [["cp", "-a", src, dst], ["sync", "-f", os.path.dirname(dst)]]


def rounds(reps, tools):
    """Yields (round, tool) with the order rotated every round."""
    for r in range(reps):
        k = r % len(tools)
        for t in tools[k:] + tools[:k]:
            yield r, t


def rm(path):
    shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- scenarios

def scenario_first(b, name, src, reps, expect="create", others=("rsync", "cp"), floor=None):
    times = {t: [] for t in b.dists + list(others) + (["floor"] if floor else [])}
    rss = {t: [] for t in b.dists}
    for _, tool in rounds(reps, list(times)):
        run = b.fresh(name)
        dst = os.path.join(run, "dst")
        cfg = b.config(run, dst)
        settle()
        if tool in b.bins:
            t, r = b.publish(run, cfg, src, expect, tool=tool)
            rss[tool].append(r)
        elif tool == "floor":
            t, _, _ = timed_rss([floor, src, dst, os.path.join(run, "journal.sqlite3")])
        elif tool == "rsync":
            os.makedirs(dst)
            t = timed(b.rsync(src, dst))
        else:
            t = timed(b.cp(src, dst))
        times[tool].append(t)
        log(f"  {tool:12} {t:7.3f} s")
        b.discard(run)
    b.empty_trash()
    return times, {t: max(v) for t, v in rss.items()}


def scenario_republish(b, src, reps, floor=None):
    # Each tool republishes to a destination of its own, published once before (untimed),
    # with its own journal. The floor (when given) reads distributor's destination.
    runs = {}
    for tool in b.dists:
        run = b.fresh("b")
        cfg = b.config(run, os.path.join(run, "dst"))
        b.publish(run, cfg, src, "create", tool=tool)
        runs[tool] = (run, cfg)
    run = b.fresh("b")
    rd = os.path.join(run, "dst")
    os.makedirs(rd)
    timed(b.rsync(src, rd))
    runs["rsync"] = (run, None)
    times = {t: [] for t in b.dists + ["rsync"] + (["floor"] if floor else [])}
    rss = {t: [] for t in b.dists}
    for _, tool in rounds(reps, list(times)):
        settle()
        if tool in b.bins:
            run, cfg = runs[tool]
            t, r = b.publish(run, cfg, src, "unchanged", tool=tool)
            rss[tool].append(r)
        elif tool == "floor":
            run = runs["distributor"][0]
            t, _, _ = timed_rss([floor, src, os.path.join(run, "dst"), os.path.join(run, "journal.sqlite3")])
        else:
            t = timed(b.rsync(src, rd))
        times[tool].append(t)
        log(f"  {tool:12} {t:7.3f} s")
    for run, _ in runs.values():
        b.discard(run)
    b.empty_trash()
    return times, {t: max(v) for t, v in rss.items()}


def scenario_changed(b, src, changed, reps):
    times = {t: [] for t in b.dists + ["rsync"]}
    rss = {t: [] for t in b.dists}
    for _, tool in rounds(reps, list(times)):
        run = b.fresh("c")
        dst = os.path.join(run, "dst")
        cfg = b.config(run, dst)
        if tool in b.bins:
            b.publish(run, cfg, src, "create", tool=tool)
            b.settle_after_deletes()
            t, r = b.publish(run, cfg, changed, "replace_older", tool=tool)
            rss[tool].append(r)
        else:
            os.makedirs(dst)
            timed(b.rsync(src, dst))
            b.settle_after_deletes()
            t = timed(b.rsync(changed, dst))
        times[tool].append(t)
        log(f"  {tool:12} {t:7.3f} s")
        b.discard(run)
    b.empty_trash()
    return times, {t: max(v) for t, v in rss.items()}


def scenario_shared_plan(b, owners, reps):
    # Each build plans against a shared root it built itself (same bundles), with its own
    # journal.
    changed = os.path.join(b.work, "bundles", "e-owner00-changed")
    runs = {}
    for tool in b.dists:
        run = b.fresh("e")
        dst = os.path.join(run, "shared")
        first = None
        for k in range(owners):
            src = os.path.join(b.work, "bundles", f"e-owner{k:02d}")
            if not os.path.exists(src):
                write_bundle(src, tree_files(b.s["e_files"], 50, 128, prefix=f"o{k:02d}/"),
                             f"owner{k:02d}", T0)
            cfg = b.config(run, dst, pipeline=f"p{k:02d}", mode="shared_root")
            b.publish(run, cfg, src, "create", tool=tool)
            if k == 0:
                first = (cfg, src)
        if not os.path.exists(changed):
            changed_copy(first[1], changed, 0.01, "owner00", T1)
        runs[tool] = (run, first[0], dst)
    times = {t: [] for t in b.dists}
    rss = {t: [] for t in b.dists}
    for _, tool in rounds(reps, list(times)):
        run, cfg, _ = runs[tool]
        settle()
        t, r = b.publish(run, cfg, changed, "replace_older", command="plan", tool=tool)
        times[tool].append(t)
        rss[tool].append(r)
        log(f"  {tool:12} {t:7.3f} s {r // 1024} MiB")
    with open(os.path.join(runs["distributor"][2], ".distributor.json")) as f:
        total = len(json.load(f)["outputs"])
    for run, _, _ in runs.values():
        b.discard(run)
    b.empty_trash()
    return times, {t: max(v) for t, v in rss.items()}, total


def journal_events_per_op(journal):
    db = sqlite3.connect(journal)
    try:
        rows = db.execute("SELECT operation_id, count(*) FROM journal_events GROUP BY operation_id").fetchall()
    finally:
        db.close()
    return sorted({c for _, c in rows})


def journal_check(b, small, large, tool="distributor"):
    """Events (autocommitted rows) per operation must not grow with the file count. Also
    the journal's size per file after the large publication (checkpointed, so the -wal is
    in the file) and the size of its JSON report."""
    out = {}
    for tag, src in (("small", small), ("large", large)):
        run = b.fresh("j")
        cfg = b.config(run, os.path.join(run, "dst"))
        _, _, report = timed_rss(b.dist_cmd(run, cfg, src, "publish", tool))
        journal = os.path.join(run, "journal.sqlite3")
        out[tag] = journal_events_per_op(journal)
        if tag == "large":
            with sqlite3.connect(journal) as c:
                c.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                files = c.execute("SELECT count(*) FROM placements").fetchone()[0]
            out["journal_bytes_per_file"] = os.path.getsize(journal) / max(1, files)
            out["report_bytes"] = len(report)
        b.discard(run)
    b.empty_trash()
    return out


# ---------------------------------------------------------------- report

def med(v):
    return statistics.median(v) if v else None


def fmt_s(v):
    return "n/a" if v is None else f"{v:.3f} s"


def ratio(a, b):
    return a / b if (a is not None and b) else None


def fmt_x(v):
    return "n/a" if v is None else f"{v:.2f}x"


def target_met(key, ratio_rsync, secs, mib):
    if key in "acd":
        ok = ratio_rsync is not None and ratio_rsync <= 1.0
    elif key in "bh":
        ok = ratio_rsync is not None and ratio_rsync <= 0.5
    elif key == "e":
        ok = secs < 2.0 and mib < 300
    else:
        return "-"
    return "yes" if ok else "NO"


def report(rows):
    """The table without a baseline (the format this page has always had)."""
    print(f"| scenario | distributor | rsync+sync | cp+sync | distributor/rsync | distributor peak RSS | target | met |")
    print(f"|---|---|---|---|---|---|---|---|")
    for key, label, t, rss, target in rows:
        d, r, c = med(t.get("distributor", [])), med(t.get("rsync", [])), med(t.get("cp", []))
        dr = ratio(d, r)
        mib = rss["distributor"] / 1024
        print(f"| {label} | {fmt_s(d)} | {fmt_s(r)} | {fmt_s(c)} | {fmt_x(dr)} | {mib:.0f} MiB | {target} "
              f"| {target_met(key, dr, d, mib)} |")


def report_baseline(rows):
    """The table with a baseline: both builds' medians, each one's ratios to rsync and cp,
    distributor/baseline (of the medians, and the median of the per-round ratios: each
    round runs every tool once), both peak RSS, and the target for each build."""
    print("| scenario | distributor | baseline | rsync+sync | cp+sync | distributor/rsync | baseline/rsync "
          "| distributor/cp | baseline/cp | distributor/baseline | per round | distributor peak RSS "
          "| baseline peak RSS | target | met (distributor, baseline) |")
    print("|---" * 15 + "|")
    for key, label, t, rss, target in rows:
        d, o = med(t["distributor"]), med(t["baseline"])
        r, c = med(t.get("rsync", [])), med(t.get("cp", []))
        paired = med([x / y for x, y in zip(t["distributor"], t["baseline"])])
        dm, om = rss["distributor"] / 1024, rss["baseline"] / 1024
        met = f"{target_met(key, ratio(d, r), d, dm)}, {target_met(key, ratio(o, r), o, om)}"
        print(f"| {label} | {fmt_s(d)} | {fmt_s(o)} | {fmt_s(r)} | {fmt_s(c)} | {fmt_x(ratio(d, r))} "
              f"| {fmt_x(ratio(o, r))} | {fmt_x(ratio(d, c))} | {fmt_x(ratio(o, c))} | {fmt_x(ratio(d, o))} "
              f"| {fmt_x(paired)} | {dm:.0f} MiB | {om:.0f} MiB | {target} | {met} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="distributor release binary (\"distributor\")")
    ap.add_argument("--baseline", help="a second distributor binary, run in the same rounds "
                    "(\"baseline\"), e.g. a build of the commit before a change")
    ap.add_argument("--work", required=True, help="scratch directory (emptied first)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--only", default="abcdefgh", help="scenarios to run, e.g. 'ad'")
    ap.add_argument("--floor", help="the floor program (target/release/examples/floor), "
                    "timed in the republications (b), (g) and (h) as a tool of its own")
    ap.add_argument("--floor-first", help="the first-publication floor program "
                    "(target/release/examples/floor_first), timed in the first publications "
                    "(a) and (f) as a tool of its own")
    ap.add_argument("--reps", type=int, help="runs per tool (default 5, quick 3)")
    ap.add_argument("--reps-big", type=int, help="runs per tool in (f) (default 2)")
    ap.add_argument("--raw", help="also write every run's seconds and the peak RSS to this JSON file")
    ap.add_argument("--million", action="store_true",
                    help="(f) and (g) at 1,000,000 outputs, one run per tool (about 15 minutes, 10 GB)")
    ap.add_argument("--lean", action="store_true",
                    help="(f) without rsync and without the journal check: with --million, "
                    "12 GB of disk at the peak instead of 16 (the source and one tree per tool)")
    args = ap.parse_args()
    s = dict(QUICK if args.quick else FULL)
    if args.million:
        s.update(f_files=1_000_000, f_dirs=10_000, reps_big=1)
    if args.reps:
        s["reps"] = args.reps
    if args.reps_big:
        s["reps_big"] = args.reps_big
    work = os.path.abspath(args.work)
    bins = {"distributor": os.path.abspath(args.bin)}
    if args.baseline:
        bins["baseline"] = os.path.abspath(args.baseline)
    for tool, path in bins.items():
        if not os.access(path, os.X_OK):
            raise SystemExit(f"{tool} binary {path} is not an executable file")
    rm(work)
    os.makedirs(os.path.join(work, "bundles"))
    b = Bench(bins, work, s, 2 if args.quick else 6)
    started = time.perf_counter()
    load_start = os.getloadavg()

    log("generating bundles ...")
    a_src = write_bundle(os.path.join(work, "bundles", "a"),
                         tree_files(s["a_files"], s["a_dirs"], s["a_size"]), "bench", T0)
    c_src = changed_copy(a_src, os.path.join(work, "bundles", "c"), 0.01, "bench", T1)
    rows = []
    jc = {}
    floor = os.path.abspath(args.floor) if args.floor else None
    floor_first = os.path.abspath(args.floor_first) if args.floor_first else None
    R, RB = s["reps"], s["reps_big"]
    a_label = f"a: first publish, {s['a_files']} x {s['a_size'] // 1024} KiB in {s['a_dirs']} dirs"
    if "a" in args.only:
        log(a_label)
        t, rss = scenario_first(b, "a", a_src, R, floor=floor_first)
        rows.append(("a", a_label, t, rss, "<= 1.0x rsync"))
    if "b" in args.only:
        label = "b: republish, nothing changed"
        log(label)
        t, rss = scenario_republish(b, a_src, R, floor)
        rows.append(("b", label, t, rss, "<= 0.5x rsync"))
    if "c" in args.only:
        label = "c: 1% of the files changed"
        log(label)
        t, rss = scenario_changed(b, a_src, c_src, R)
        rows.append(("c", label, t, rss, "<= 1.0x rsync"))
    if "d" in args.only:
        label = f"d: first publish, {s['d_files']} x {s['d_size'] >> 20} MiB"
        log(label)
        d_src = write_bundle(os.path.join(work, "bundles", "d"),
                             [(f"big{i}.bin", os.urandom(s["d_size"])) for i in range(s["d_files"])],
                             "big", T0)
        t, rss = scenario_first(b, "d", d_src, R)
        rows.append(("d", label, t, rss, "<= 1.0x rsync"))
        rm(d_src)
    if "e" in args.only:
        log("e: building the shared root ...")
        t, rss, total = scenario_shared_plan(b, s["e_owners"], R)
        label = f"e: plan --json, shared root of {total} outputs, {s['e_owners']} owners"
        rows.append(("e", label, t, rss, "< 2 s, < 300 MiB"))
    if "f" in args.only or "g" in args.only:
        f_src = write_bundle(os.path.join(work, "bundles", "f"),
                             tree_files(s["f_files"], s["f_dirs"], s["f_size"]), "many", T0)
    if "f" in args.only:
        label = f"f: first publish, {s['f_files']} outputs of {s['f_size']} B"
        log(label)
        # Peak memory is the point here; cp adds minutes and nothing to compare.
        t, rss = scenario_first(b, "f", f_src, RB, others=() if args.lean else ("rsync",),
                                floor=None if args.million else floor_first)
        rows.append(("f", label, t, rss, "peak RSS reported"))
        for tool in b.dists if not args.lean else ():
            jc[tool] = journal_check(b, a_src, f_src, tool)
    if "g" in args.only:
        label = f"g: republish, {s['f_files']} outputs, nothing changed"
        log(label)
        # A republication adds no files: at a million, (g) runs as many rounds as (b).
        t, rss = scenario_republish(b, f_src, R if args.million else RB, floor)
        rows.append(("g", label, t, rss, "<= 0.5x rsync"))
    if "f" in args.only or "g" in args.only:
        rm(f_src)
    if "h" in args.only:
        label = f"h: republish, small bundle of {s['h_files']} x 4 KiB, nothing changed"
        log(label)
        h_src = write_bundle(os.path.join(work, "bundles", "h"),
                             tree_files(s["h_files"], s["h_dirs"], 4096), "small", T0)
        t, rss = scenario_republish(b, h_src, R, floor)
        rows.append(("h", label, t, rss, "<= 0.5x rsync, <= 1.5x floor"))
        rm(h_src)

    print()
    if args.baseline:
        report_baseline(rows)
    else:
        report(rows)
    print()
    for key, label, t, _, _ in rows:
        if t.get("floor"):
            f = med(t["floor"])
            line = ", ".join(f"{tool}/floor {fmt_x(ratio(med(t[tool]), f))} (per round "
                             f"{fmt_x(med([x / y for x, y in zip(t[tool], t['floor'])]))})"
                             for tool in b.dists)
            if key in ("a", "f"):
                per = lambda o: med([x / y for x, y in zip(t["floor"], t[o])])
                print(f"{key}: first-publication floor {fmt_s(f)}; {line}; floor/rsync+sync "
                      f"{fmt_x(ratio(f, med(t['rsync'])))} (per round {fmt_x(per('rsync'))}) "
                      f"(goal for distributor <= 0.8x rsync+sync)")
            else:
                print(f"{key}: floor {fmt_s(f)}; {line} (goal <= 1.3x; (h) <= 1.5x)")
    for tool, counts in jc.items():
        who = "" if tool == "distributor" else f" ({tool})"
        print(f"journal events per operation{who}: {s['a_files']} files -> {counts['small']}, "
              f"{s['f_files']} files -> {counts['large']} (must be equal)")
        print(f"journal bytes per file{who} after the first publish of {s['f_files']}: "
              f"{counts['journal_bytes_per_file']:.0f} (goal <= 150); JSON report "
              f"{counts['report_bytes'] / 1e6:.1f} MB")
    if args.baseline:
        print(f"distributor: {bins['distributor']}\nbaseline: {bins['baseline']}")
    load_end = os.getloadavg()
    print(f"runs per tool: {R} (f: {RB}); total benchmark time {time.perf_counter() - started:.0f} s; "
          f"load average (1, 5, 15 min) at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump({"binaries": bins, "sizes": s, "load_start": load_start, "load_end": load_end,
                       "scenarios": {key: {"label": label, "seconds": t, "peak_rss_kib": rss}
                                     for key, label, t, rss, _ in rows},
                       "journal_events": jc}, f, indent=1)
    rm(os.path.join(work, "runs"))


if __name__ == "__main__":
    main()
