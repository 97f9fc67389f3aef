#!/usr/bin/env python3
"""The auditor's commands at scale (docs/audit.md): `blame PATH`, `history --path DIR/**`
and `history --takeovers --since 7d` on a journal of 1,000,000 action rows over 10,000
operations, timed as a user runs them (release build, warm cache, each a fresh process),
median of --reps runs.

    python3 benches/audit.py --bin target/release/distributor [--ops 10000] [--files 100]

How the journal is built: distributor publishes a bundle of --files files once, so the
journal has its real schema and one real operation; then each further operation is a
copy of that one (its operation row, its action set and rows, its events) under a new
operation id, a later start time and, every 100th, a takeover from another owner, written
straight into the journal with SQLite in one transaction. The journal's append-only
triggers reject updates and deletes, not inserts, so the copies are rows like any other.
Every 10th operation writes a file under a directory of its own (`dir-<n>/`), so that
`history --path dir-7/**` matches a few operations among 10,000. The journal's size per
action row is printed too (the journal's bytes over its action rows).
"""

import argparse
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import uuid


def sh(args, **kw):
    r = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw)
    if r.returncode not in (0, 1):
        sys.exit(f"{args}: exit {r.returncode}: {r.stderr.decode()}")
    return r


def first_publication(binary, work, files):
    """One real publication of `files` files: the journal's schema and a model operation."""
    bundle = os.path.join(work, "bundle")
    os.makedirs(bundle)
    for i in range(files):
        d = os.path.join(bundle, f"d{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.html"), "w") as f:
            f.write(f"file {i}\n")
    sh([binary, "manifest", bundle, "--id", "site", "--created-at", "2026-12-01T00:00:00Z"])
    cfg = os.path.join(work, "site.yaml")
    with open(cfg, "w") as f:
        f.write(
            "version: 1\npipeline:\n  id: site\ndestinations:\n  - id: web\n"
            f"    path: {os.path.join(work, 'www')}\n"
        )
    journal = os.path.join(work, "journal.sqlite3")
    r = sh([binary, "publish", "--config", cfg, "--source", bundle, "--journal", journal])
    if r.returncode != 0:
        sys.exit(r.stderr.decode())
    return journal


def grow(journal, ops):
    """Copies the journal's one operation `ops - 1` times (see the module's doc)."""
    c = sqlite3.connect(journal)
    c.execute("PRAGMA journal_mode=WAL")
    (model,) = c.execute("SELECT operation_id FROM journal_operations").fetchone()
    cols = [r[1] for r in c.execute("PRAGMA table_info(journal_operations)")]
    row = dict(zip(cols, c.execute("SELECT * FROM journal_operations").fetchone()))
    (set_id,) = c.execute(
        "SELECT id FROM journal_action_sets WHERE operation_id = ?", (model,)
    ).fetchone()
    set_cols = [r[1] for r in c.execute("PRAGMA table_info(journal_action_sets)")]
    set_row = dict(zip(set_cols, c.execute("SELECT * FROM journal_action_sets WHERE id = ?", (set_id,)).fetchone()))
    rows = c.execute(
        "SELECT seq, kind, path, size, sha256, target, replaces FROM journal_action_rows WHERE action_set = ?",
        (set_id,),
    ).fetchall()
    events = c.execute(
        "SELECT at, event, detail FROM journal_events WHERE operation_id = ?", (model,)
    ).fetchall()
    t0 = time.time() - 30 * 86400
    c.execute("BEGIN")
    for n in range(1, ops):
        op = str(uuid.uuid4())
        started = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t0 + n * 250)) + ".000Z"
        r = dict(row, operation_id=op, started_at=started)
        if n % 100 == 0:
            r["decision"] = "replace_takeover"
            r["takeovers_json"] = (
                '[{"from_owner":"other/web","from_source_id":"other","cross_owner":true,"paths":["d0/f0.html"]}]'
            )
        c.execute(
            f"INSERT INTO journal_operations ({','.join(cols)}) VALUES ({','.join('?' * len(cols))})",
            [r[k] for k in cols],
        )
        s = dict(set_row, operation_id=op)
        s.pop("id", None)
        keys = list(s)
        cur = c.execute(
            f"INSERT INTO journal_action_sets ({','.join(keys)}) VALUES ({','.join('?' * len(keys))})",
            [s[k] for k in keys],
        )
        new_set = cur.lastrowid
        mine = [
            (new_set, seq, kind, (f"dir-{n // 10}/" + path) if n % 10 == 0 else path, size, sha, target, replaces)
            for (seq, kind, path, size, sha, target, replaces) in rows
        ]
        c.executemany(
            "INSERT INTO journal_action_rows (action_set, seq, kind, path, size, sha256, target, replaces) VALUES (?,?,?,?,?,?,?,?)",
            mine,
        )
        c.executemany(
            "INSERT INTO journal_events (operation_id, at, event, detail) VALUES (?,?,?,?)",
            [(op, started, e, d) for (_, e, d) in events],
        )
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    (n_rows,) = c.execute("SELECT count(*) FROM journal_action_rows").fetchone()
    c.close()
    return n_rows


def timed(args, reps):
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        r = sh(args)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1000, r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="distributor release binary")
    ap.add_argument("--work", default="target/bench-audit", help="scratch directory (emptied first)")
    ap.add_argument("--ops", type=int, default=10000)
    ap.add_argument("--files", type=int, default=100, help="action rows per operation")
    ap.add_argument("--reps", type=int, default=9)
    a = ap.parse_args()
    binary = os.path.abspath(a.bin)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    work = os.path.abspath(a.work)
    journal = first_publication(binary, work, a.files)
    t = time.time()
    n_rows = grow(journal, a.ops)
    size = os.path.getsize(journal)
    print(f"journal: {a.ops} operations, {n_rows} action rows, {size / n_rows:.0f} bytes per action row (built in {time.time() - t:.0f} s)")
    j = ["--journal", journal]
    for name, args in [
        ("blame PATH", [binary, "blame", *j, "d3/f3.html"]),
        ("blame PATH --all", [binary, "blame", *j, "--all", "--jsonl", "d3/f3.html"]),
        ("history --path DIR/**", [binary, "history", *j, "--path", "dir-7/**", "--jsonl"]),
        ("history --takeovers --since 7d", [binary, "history", *j, "--takeovers", "--since", "7d", "--jsonl"]),
    ]:
        sh(args)  # warm the cache
        ms, r = timed(args, a.reps)
        lines = len(r.stdout.splitlines())
        print(f"{name:34s} {ms:8.1f} ms  ({lines} lines of output)")


if __name__ == "__main__":
    main()
