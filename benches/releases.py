#!/usr/bin/env python3
"""Benchmark of destinations with `releases` (SPEC §15) against the same publications in
place. Run through benches/releases.sh, which builds the release binary first.

Every timed variant runs once per round, in one alternating run (the order of the
variants rotates every round), each on a fresh destination that already holds the
previous version, published there (untimed) just before; the table reports medians, and
releases/in place both as the ratio of the medians and as the median of the per-round
ratios. As in benches/publish.py, nothing is deleted between timed runs (run directories
are removed together at the end), an untimed global `sync` precedes every timed run, and
full runs wait 6 s after the setup publication so that ext4's recently-freed inodes do
not slow the timed one (docs/performance.md, "The filesystem").

Timed variants:
  rel1    releases: 10,000 files of 4 KiB in 100 folders, 1% of them changed (new
          content, new manifest with a newer created_at): decision replace_older; the new
          release holds 100 new files and 9,900 hard links to the active release
  inp1    the same publication in place (no `releases`)
  rsync1  reference: `rsync -a --delete` of the changed bundle over the previous one,
          then `sync -f`
  rel0    releases: the same files, nothing changed, a manifest with a newer created_at:
          decision replace_older, every file carried over by a hard link; what it costs
          beyond inp0 is the release build (10,000 `linkat`, 100 `mkdir`, the `syncfs`
          and the symlink swap)
  inp0    the same in place: only the state file and the journal are written
  cpal    reference for the links alone: `cp -al` of the previous version's tree into a
          new directory, then `sync -f`

With --baseline OLD_BINARY, two more variants run in the same rounds: rel1b and inp1b,
rel1 and inp1 published by the other build (say, of the commit before a change), so a
change's cost is measured side by side in one alternating run, never as two runs minutes
apart.

Untimed: disk used per retained release. One destination with releases (keep high
enough to keep them all) gets the first version and then N versions, each with another
1% of the files changed; the releases directory's disk use is summed over st_blocks with
every inode counted once (as `du` does within one invocation, which is run as a
cross-check), release by release in activation order, so each release's figure is what
it added: its new inodes (changed files, directories, its state file).
"""

import argparse
import json
import os
import shutil
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from publish import (T0, T1, Bench, fmt_s, fmt_x, log, med, ratio, rm,  # noqa: E402
                     rounds, settle, timed, tree_files)

FULL = dict(files=10_000, dirs=100, size=4096, reps=7, versions=5, keep=3)
QUICK = dict(files=1_000, dirs=10, size=4096, reps=3, versions=3, keep=3)

VARIANTS = ["rel1", "inp1", "rsync1", "rel0", "inp0", "cpal"]
GOAL = 1.3  # releases/in place, 1% changed (issue 26's goal; it was 1.5)


def created_at(k):
    """T0 for the first version, then one hour later for each next one."""
    return f"2026-12-02T{6 + k:02d}:00:00Z"


# ---------------------------------------------------------------- bundles

class Bundles:
    """Bundle directories whose manifests `distributor manifest` writes."""

    def __init__(self, bin_, root):
        self.bin = bin_
        self.root = root

    def manifest(self, d, at):
        p = subprocess.run([self.bin, "manifest", "--id", "bench", "--created-at", at, d],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        if p.returncode != 0:
            raise SystemExit(f"distributor manifest {d} exited {p.returncode}:\n{p.stderr.decode()}")

    def first(self, name, files, dirs, size):
        d = os.path.join(self.root, name)
        os.makedirs(d)
        made = set()
        for rel, data in tree_files(files, dirs, size):
            sub = os.path.dirname(rel)
            if sub not in made:
                os.makedirs(os.path.join(d, sub))
                made.add(sub)
            with open(os.path.join(d, rel), "wb") as f:
                f.write(data)
        self.manifest(d, T0)
        return d

    def next(self, src, name, at, fraction, offset=0):
        """A copy of src (mtimes kept, as `cp -a` keeps them) with every 1/fraction-th file
        from `offset` on rewritten with new random bytes, and a new manifest dated `at`."""
        d = os.path.join(self.root, name)
        shutil.copytree(src, d, symlinks=True)
        os.unlink(os.path.join(d, "distributor-manifest.json"))
        with open(os.path.join(src, "distributor-manifest.json")) as f:
            outputs = json.load(f)["outputs"]
        if fraction:
            step = max(1, round(1 / fraction))
            for i in range(offset % step, len(outputs), step):
                o = outputs[i]
                with open(os.path.join(d, o["path"]), "wb") as f:
                    f.write(os.urandom(o["size"]))
        self.manifest(d, at)
        return d


# ---------------------------------------------------------------- harness

class ReleasesBench(Bench):
    def rconfig(self, run, dest, keep=None):
        """A config for `dest`: in place when keep is None, with `releases` otherwise."""
        path = os.path.join(run, "config.yaml")
        with open(path, "w") as f:
            f.write(f"version: 1\npipeline:\n  id: bench\ndestinations:\n"
                    f"  - id: dest\n    path: {dest}\n    state:\n      mode: single_owner\n")
            if keep is not None:
                f.write(f"    releases:\n      keep: {keep}\n")
        return path


def releases_dir(dest):
    """The default `releases.dir`: <parent of path>/.<name of path>.releases."""
    return os.path.join(os.path.dirname(dest), f".{os.path.basename(dest)}.releases")


def active_release(dest):
    return os.path.basename(os.readlink(dest))


def one_run(b, variant, v0, v1, v0b):
    """Sets up a fresh destination holding v0 (untimed), then times the variant's step.
    Returns (seconds, peak RSS KiB or None)."""
    run = b.fresh(variant)
    dst = os.path.join(run, "dst")
    rss = None
    try:
        if variant in ("rel1", "inp1", "rel0", "inp0", "rel1b", "inp1b"):
            # rel1b, inp1b: rel1, inp1 by the baseline build, its own journal and setup.
            tool = "baseline" if variant.endswith("b") else "distributor"
            keep = b.s["keep"] if variant.startswith("rel") else None
            cfg = b.rconfig(run, dst, keep)
            b.publish(run, cfg, v0, "create", tool=tool)
            b.settle_after_deletes()
            src = v1 if variant.rstrip("b").endswith("1") else v0b
            t, rss = b.publish(run, cfg, src, "replace_older", tool=tool)
            if keep is not None and not os.path.islink(dst):
                raise SystemExit(f"{variant}: {dst} is not a symlink after a publication with releases")
        elif variant == "rsync1":
            os.makedirs(dst)
            timed(b.rsync(v0, dst))
            b.settle_after_deletes()
            t = timed(b.rsync(v1, dst))
        else:  # cpal
            timed([["cp", "-a", v0, dst]])
            b.settle_after_deletes()
            t = timed([["cp", "-al", dst, os.path.join(run, "new")], ["sync", "-f", run]])
    finally:
        b.discard(run)
    return t, rss


def timed_rounds(b, v0, v1, v0b, reps, variants=VARIANTS):
    times = {v: [] for v in variants}
    rss = {v: [] for v in variants}
    order = []
    for r, variant in rounds(reps, variants):
        settle()
        t, m = one_run(b, variant, v0, v1, v0b)
        times[variant].append(t)
        if m is not None:
            rss[variant].append(m)
        order.append((r, variant, t))
        log(f"  round {r + 1} {variant:7} {t:7.3f} s" + (f" {m // 1024} MiB" if m else ""))
    return times, {v: max(x) for v, x in rss.items() if x}, order


def entries(base, skip=()):
    """Every path under base, base included, as (path relative to base, lstat); the
    top-level names in `skip` are left out."""
    for dirpath, dirnames, filenames in os.walk(base):
        if dirpath == base:
            dirnames[:] = [n for n in dirnames if n not in skip]
            filenames = [n for n in filenames if n not in skip]
        names = filenames + [n for n in dirnames if os.path.islink(os.path.join(dirpath, n))]
        for p in [dirpath] + [os.path.join(dirpath, n) for n in names]:
            yield os.path.relpath(p, base), os.lstat(p)


def kind_of(rel, st):
    if stat.S_ISDIR(st.st_mode):
        return "directories"
    if rel == ".distributor.json":
        return "state file"
    if stat.S_ISREG(st.st_mode):
        return "files"
    return "other"


def disk_use(rdir, order):
    """Bytes on disk (st_blocks) of each release in `order`, counting an inode only in the
    first release (in activation order) that holds it, by kind; and of the rest of
    releases.dir (its own records, lock, staging)."""
    seen = set()
    per = []
    for rel_id in order:
        got = {"directories": 0, "state file": 0, "files": 0, "other": 0}
        new_inodes = 0
        for rel, st in entries(os.path.join(rdir, rel_id)):
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            new_inodes += 1
            got[kind_of(rel, st)] += st.st_blocks * 512
        got["total"] = sum(got.values())
        got["new inodes"] = new_inodes
        per.append(got)
    rest = 0
    for _, st in entries(rdir, skip=set(order)):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            rest += st.st_blocks * 512
    return per, rest


def du(paths):
    """`du -s -B1` of the paths in one invocation: a hard-linked inode counts once, in the
    first argument holding it."""
    out = subprocess.run(["du", "-s", "-B1"] + paths, check=True, stdout=subprocess.PIPE).stdout
    return [int(line.split("\t", 1)[0]) for line in out.decode().splitlines()]


def disk_scenario(b, v0, n):
    """First version, then n versions each with another 1% changed, kept all."""
    run = b.fresh("disk")
    dst = os.path.join(run, "dst")
    cfg = b.rconfig(run, dst, keep=n)
    src, order, secs, versions = v0, [], [], []
    for k in range(n + 1):
        if k:
            src = b.bundles.next(src, f"disk-v{k}", created_at(k), 0.01, offset=k)
            versions.append(src)
        settle()
        t, _ = b.publish(run, cfg, src, "create" if k == 0 else "replace_older")
        secs.append(t)
        order.append(active_release(dst))
        log(f"  version {k}: {t:.3f} s, release {order[-1]}")
    rdir = releases_dir(dst)
    on_disk = sorted(e for e in os.listdir(rdir) if os.path.isdir(os.path.join(rdir, e))
                     and e in order)
    if len(on_disk) != n + 1:
        raise SystemExit(f"expected {n + 1} releases in {rdir}, found {len(on_disk)}")
    per, rest = disk_use(rdir, order)
    du_per = du([os.path.join(rdir, r) for r in order])
    du_all = du([rdir])[0]
    b.discard(run)
    for v in versions:
        rm(v)
    return {"releases": order, "seconds": secs, "per_release": per, "rest": rest,
            "du_per_release": du_per, "du_releases_dir": du_all}


# ---------------------------------------------------------------- report

def mib(x):
    return f"{x / (1 << 20):.2f} MiB"


def report(s, times, rss, disk):
    n, size = s["files"], s["size"]
    rel1, inp1, rs1 = med(times["rel1"]), med(times["inp1"]), med(times["rsync1"])
    rel0, inp0, cpal = med(times["rel0"]), med(times["inp0"]), med(times["cpal"])
    p1 = med([x / y for x, y in zip(times["rel1"], times["inp1"])])
    p0 = med([x / y for x, y in zip(times["rel0"], times["inp0"])])
    r1 = ratio(rel1, inp1)
    # Judged on the median of the per-round ratios (each round runs every variant once).
    met = "yes" if p1 is not None and p1 <= GOAL else "NO"
    print(f"| scenario | releases | in place | releases/in place (per round) | rsync+sync "
          f"| cp -al+sync | releases/rsync | peak RSS releases / in place | goal | met |")
    print("|---" * 10 + "|")
    print(f"| 1: {n} x {size // 1024} KiB in {s['dirs']} dirs, 1% changed | {fmt_s(rel1)} "
          f"| {fmt_s(inp1)} | {fmt_x(r1)} ({fmt_x(p1)}) | {fmt_s(rs1)} | n/a | {fmt_x(ratio(rel1, rs1))} "
          f"| {rss['rel1'] // 1024} / {rss['inp1'] // 1024} MiB | <= {GOAL}x in place | {met} |")
    print(f"| 2: nothing changed, newer created_at (every file hard-linked) | {fmt_s(rel0)} "
          f"| {fmt_s(inp0)} | {fmt_x(ratio(rel0, inp0))} ({fmt_x(p0)}) | n/a | {fmt_s(cpal)} | n/a "
          f"| {rss['rel0'] // 1024} / {rss['inp0'] // 1024} MiB | - | - |")
    print()
    extra = med([x - y for x, y in zip(times["rel0"], times["inp0"])])
    print(f"The release build in (2), releases minus in place: {extra * 1000:.0f} ms median of the "
          f"per-round differences, {extra / n * 1e6:.1f} us per carried file ({n} hard links, "
          f"{s['dirs']} directories); cp -al of the same tree plus sync -f: {fmt_s(cpal)}.")
    print()
    per = disk["per_release"]
    first, later = per[0], per[1:]
    full = n * size
    print(f"| disk, {len(per)} releases kept (first version, then {len(later)} with 1% changed) "
          f"| on disk, each inode once |")
    print("|---|---|")
    print(f"| first release (all new) | {mib(first['total'])} ({first['new inodes']} inodes) |")
    for k, p in enumerate(later, 1):
        print(f"| release {k + 1}: added | {mib(p['total'])} ({p['new inodes']} new inodes: files "
              f"{mib(p['files'])}, directories {mib(p['directories'])}, state file "
              f"{mib(p['state file'])}) |")
    add = med([p["total"] for p in later])
    print(f"| per additional release (median) | {mib(add)} = {100 * add / full:.1f}% of a full copy "
          f"({n} x {size // 1024} KiB = {mib(full)}), {100 * add / first['total']:.1f}% of the first release |")
    print(f"| releases dir in all (`du -s`) | {mib(disk['du_releases_dir'])} (of which outside the "
          f"releases: {mib(disk['rest'])}) |")
    print()
    print(f"`du -s -B1` of the releases in activation order, one invocation: "
          f"{', '.join(mib(x) for x in disk['du_per_release'])}.")
    print(f"Publication times of the {len(per)} versions (untimed scenario, for the record): "
          f"{', '.join(f'{t:.3f}' for t in disk['seconds'])} s.")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="distributor release binary")
    ap.add_argument("--work", required=True, help="scratch directory (emptied first)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--reps", type=int, help="rounds: runs per variant (default 7, quick 3)")
    ap.add_argument("--versions", type=int, help="changed versions published after the first "
                    "in the disk scenario (default 5, quick 3)")
    ap.add_argument("--raw", help="also write every run's seconds and the disk figures to this JSON file")
    ap.add_argument("--baseline", help="another distributor build, timed as rel1b and inp1b in the same rounds")
    args = ap.parse_args()
    s = dict(QUICK if args.quick else FULL)
    if args.reps:
        s["reps"] = args.reps
    if args.versions:
        s["versions"] = args.versions
    work = os.path.abspath(args.work)
    bin_ = os.path.abspath(args.bin)
    if not os.access(bin_, os.X_OK):
        raise SystemExit(f"{bin_} is not an executable file")
    rm(work)
    os.makedirs(os.path.join(work, "bundles"))
    bins = {"distributor": bin_}
    variants = list(VARIANTS)
    if args.baseline:
        bins["baseline"] = os.path.abspath(args.baseline)
        variants += ["rel1b", "inp1b"]
    b = ReleasesBench(bins, work, s, 2 if args.quick else 6)
    b.bundles = Bundles(bin_, os.path.join(work, "bundles"))
    started = time.perf_counter()
    load_start = os.getloadavg()

    log("generating bundles ...")
    v0 = b.bundles.first("v0", s["files"], s["dirs"], s["size"])
    v1 = b.bundles.next(v0, "v1", T1, 0.01)
    v0b = b.bundles.next(v0, "v0-newer", T1, 0)
    settle()
    time.sleep(b.cool)

    log(f"timed: {', '.join(variants)}, {s['reps']} rounds")
    times, rss, order = timed_rounds(b, v0, v1, v0b, s["reps"], variants)
    b.empty_trash()
    log(f"disk: first version and {s['versions']} changed ones, all kept")
    disk = disk_scenario(b, v0, s["versions"])
    load_end = os.getloadavg()

    print()
    report(s, times, rss, disk)
    if args.baseline:
        for new, old in [("rel1", "rel1b"), ("inp1", "inp1b")]:
            per = med([x / y for x, y in zip(times[new], times[old])])
            print(f"{new} against the baseline ({old}): {fmt_s(med(times[new]))} / {fmt_s(med(times[old]))}"
                  f" = {fmt_x(ratio(med(times[new]), med(times[old])))} (per round {fmt_x(per)})")
    print(f"rounds: {s['reps']}; total benchmark time {time.perf_counter() - started:.0f} s; "
          f"load average (1, 5, 15 min) at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump({"binary": bin_, "sizes": s, "load_start": load_start, "load_end": load_end,
                       "seconds": times, "peak_rss_kib": rss,
                       "runs_in_order": [{"round": r, "variant": v, "seconds": t} for r, v, t in order],
                       "disk": disk}, f, indent=1)
    b.empty_trash()
    rm(os.path.join(work, "runs"))


if __name__ == "__main__":
    main()
