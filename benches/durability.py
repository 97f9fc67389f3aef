#!/usr/bin/env python3
"""Staging durability: an fsync per staged file against one syncfs of the filesystem.

    python3 benches/durability.py [--only ad] [--reps 5] [--threads 2] [--work DIR]

distributor makes its staged files durable before the first rename into the bundle path
(SPEC §13) with one syncfs(2) of the destination's filesystem (make_staged_durable in the
local backend). The alternative is an fsync of each staged file right after it is written.
This experiment models both outside distributor, on the sizes of benches/publish.py:

  a  10,000 files of 4 KiB, placed into 100 directories
  d  4 files of 64 MiB, placed into the destination's top directory

Each timed run, in a fresh run directory of its own:
  1. stage: write every file into staging buckets of 256 (new/<bucket>/<i>, as distributor
     names them), on --threads threads each taking a run of consecutive files, as
     distributor's staging does; variant "fsync" fsyncs each file on its thread right after
     its last write, variant "syncfs" calls syncfs once after all are written;
  2. place: rename each staged file into the destination (directories made as needed),
     then fsync every destination directory that gained entries and the staging buckets,
     as distributor does before its commit point (the same in both variants).

The two variants alternate, the order flipping every round; an untimed sync precedes every
run; nothing is deleted until all rounds of a scenario are done (ext4 without a journal
allocates inodes slowly right after many were freed: docs/performance.md, the filesystem).
Prints the medians of stage (write + make durable), of the durability call alone, of place
(renames + directory fsyncs) and of the total.
"""

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

LIBC = ctypes.CDLL(None, use_errno=True)
BUCKET = 256
CHUNK = 1 << 20

SCENARIOS = {
    "a": dict(files=10_000, size=4096, dirs=100),
    "d": dict(files=4, size=64 << 20, dirs=0),
}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def syncfs(fd):
    if LIBC.syncfs(fd) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def settle():
    subprocess.run(["sync"], check=True)


def dest_rel(i, n, dirs):
    if not dirs:
        return "", f"big{i}.bin"
    per = max(1, n // dirs)
    return f"d{i // per:04d}", f"f{i:06d}.bin"


def stage_run(bucket_fds, lo, hi, data, per_file_fsync, fsync_secs, errors):
    try:
        spent = 0.0
        for i in range(lo, hi):
            fd = os.open(str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644,
                         dir_fd=bucket_fds[i // BUCKET])
            try:
                view = memoryview(data)
                while view:
                    n = os.write(fd, view[:CHUNK])
                    view = view[n:]
                if per_file_fsync:
                    t = time.perf_counter()
                    os.fsync(fd)
                    spent += time.perf_counter() - t
            finally:
                os.close(fd)
        fsync_secs.append(spent)
    except BaseException as e:  # reported by the caller
        errors.append(e)


def one_run(run, sc, data, variant, threads):
    n, dirs = sc["files"], sc["dirs"]
    staging = os.path.join(run, "staging", "new")
    dst = os.path.join(run, "dst")
    nb = (n + BUCKET - 1) // BUCKET
    for b in range(nb):
        os.makedirs(os.path.join(staging, str(b)))
    os.makedirs(dst)
    bucket_fds = [os.open(os.path.join(staging, str(b)), os.O_RDONLY | os.O_DIRECTORY) for b in range(nb)]
    dst_fd = os.open(dst, os.O_RDONLY | os.O_DIRECTORY)
    settle()
    try:
        t0 = time.perf_counter()
        # 1. stage
        k = min(threads, n)
        bounds = [(n * j // k, n * (j + 1) // k) for j in range(k)]
        fsync_secs, errors = [], []
        ts = [threading.Thread(target=stage_run,
                               args=(bucket_fds, lo, hi, data, variant == "fsync", fsync_secs, errors))
              for lo, hi in bounds]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        if errors:
            raise errors[0]
        if variant == "syncfs":
            ts0 = time.perf_counter()
            syncfs(dst_fd)
            durable = time.perf_counter() - ts0
        else:
            durable = sum(fsync_secs) / k  # per thread: the wall time fsync added
        t1 = time.perf_counter()
        # 2. place, then fsync the directories that changed
        dir_fds = {"": dst_fd}
        try:
            for i in range(n):
                d, name = dest_rel(i, n, dirs)
                if d not in dir_fds:
                    os.mkdir(d, dir_fd=dst_fd)
                    dir_fds[d] = os.open(d, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dst_fd)
                os.rename(str(i), name, src_dir_fd=bucket_fds[i // BUCKET], dst_dir_fd=dir_fds[d])
            for fd in list(dir_fds.values()) + bucket_fds:
                os.fsync(fd)
        finally:
            for d, fd in dir_fds.items():
                if d:
                    os.close(fd)
        t2 = time.perf_counter()
    finally:
        for fd in bucket_fds + [dst_fd]:
            os.close(fd)
    return dict(stage=t1 - t0, durable=durable, place=t2 - t1, total=t2 - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="ad")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2, help="staging threads (distributor: one per core)")
    ap.add_argument("--work", default="target/bench-durability")
    ap.add_argument("--cool", type=float, default=6, help="seconds to wait after deleting a scenario's runs")
    args = ap.parse_args()
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    load_start = os.getloadavg()
    variants = ["fsync", "syncfs"]
    results = {}
    seq = 0
    for key in args.only:
        sc = SCENARIOS[key]
        data = os.urandom(sc["size"])
        label = f"{key}: {sc['files']} x {sc['size'] // 1024} KiB" if sc["size"] < (1 << 20) \
            else f"{key}: {sc['files']} x {sc['size'] >> 20} MiB"
        log(label)
        res = {v: [] for v in variants}
        runs = []
        for r in range(args.reps):
            for v in variants if r % 2 == 0 else variants[::-1]:
                seq += 1
                run = os.path.join(work, f"{key}-{seq}")
                res[v].append(one_run(run, sc, data, v, args.threads))
                runs.append(run)
                m = res[v][-1]
                log(f"  {v:7} stage {m['stage']:7.3f} s (durable {m['durable']:6.3f})  "
                    f"place {m['place']:6.3f} s  total {m['total']:7.3f} s")
        for run in runs:
            shutil.rmtree(run, ignore_errors=True)
        settle()
        time.sleep(args.cool)
        results[label] = res
    load_end = os.getloadavg()
    print()
    print("| scenario | variant | stage: write + make durable | of which fsync or syncfs | "
          "place: renames + directory fsyncs | total | total vs syncfs |")
    print("|---|---|---|---|---|---|---|")
    for label, res in results.items():
        base = statistics.median(m["total"] for m in res["syncfs"])
        for v in variants:
            med = {k: statistics.median(m[k] for m in res[v]) for k in ("stage", "durable", "place", "total")}
            print(f"| {label} | {v} | {med['stage']:.3f} s | {med['durable']:.3f} s | {med['place']:.3f} s "
                  f"| {med['total']:.3f} s | {med['total'] / base:.2f}x |")
    print()
    print(f"runs per variant: {args.reps}, staging threads: {args.threads}; load average at start "
          f"{load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, at end "
          f"{load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
