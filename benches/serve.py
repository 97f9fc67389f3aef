#!/usr/bin/env python3
"""Load benchmark of `distributor serve` under slow clients (issue 16, item 5). Run
through benches/serve.sh, which builds the release binary first.

Each scenario starts a fresh server (its own destination, journal and spool under the
work directory) on 127.0.0.1, sends its uploads, then stops it with SIGTERM. Legitimate
uploads are valid bundles (FILES files of SIZE random bytes and a manifest, each with
its own created_at), POSTed all at once from one thread each; their latency runs from the
connection to the last byte of the reply. A slow client holds a valid token, declares a
10 MB body and sends one byte of it every TRICKLE seconds (the issue's trickle) until the
server answers or closes.

Scenarios:
  baseline  the legitimate uploads alone
  slow      the slow clients connect first and hold every upload slot, with the others
            queued behind them; then the legitimate uploads, all at once. The worst
            arrival order: slots are granted first come, first served, so every slow
            client gets a slot before any legitimate upload does
  off       as slow, with the limits off (--upload-min-rate 1 and a rate window and a
            deadline of 10^9 s: the server as it was before them); legitimate uploads
            give up after --off-give-up seconds

Every legitimate upload of baseline and slow must be answered 200, else the exit status
is 1. The table gives, per scenario, the legitimate uploads answered, their latency
(p50, p99, max; nearest rank) and how long they waited for a slot (the server's
`queued_ms`), the slow clients' 408s and when they were cut, and the wall time. The
machine's load average is sampled every 10 s.
"""

import argparse
import hashlib
import io
import json
import math
import os
import select
import shutil
import socket
import subprocess
import sys
import tarfile
import threading
import time

TOKEN = "bench-token-5e1f0c2a"
T0 = 1_796_191_200  # 2026-12-02T06:00:00Z
OFF = ["--upload-min-rate", "1", "--upload-rate-window", "1000000000",
       "--upload-deadline", "1000000000"]
FULL = dict(legit=200, slow=20, files=4, size=16 * 1024)
QUICK = dict(legit=40, slow=8, files=2, size=4 * 1024)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def iso(t):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


# ---------------------------------------------------------------- uploads

def bundle_tar(n, files, size):
    """Upload n: `files` random files of `size` bytes and the manifest, as a tar."""
    contents = [(f"data/{k}.bin", os.urandom(size)) for k in range(files)]
    manifest = {
        "manifest_version": 1, "id": "bench", "created_at": iso(T0 + n),
        "outputs": [{"path": p, "size": len(c), "sha256": hashlib.sha256(c).hexdigest()}
                    for p, c in contents],
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path, data in [("distributor-manifest.json", json.dumps(manifest).encode())] + contents:
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mtime = T0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def head(addr, length):
    return (f"POST /v1/pipelines/bench/bundles HTTP/1.1\r\nHost: {addr[0]}:{addr[1]}\r\n"
            f"Authorization: Bearer {TOKEN}\r\nContent-Type: application/x-tar\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


def reply_of(buf):
    """(status, body) once `buf` holds a whole Content-Length framed reply, else None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    lines = buf[:end].decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k.strip().lower() == "content-length":
            length = int(v.strip())
    if len(buf) < end + 4 + length:
        return None
    return int(lines[0].split()[1]), buf[end + 4:end + 4 + length]


def legit_upload(addr, body, give_up, start, out):
    """POSTs `body` once `start` is set; appends (status, seconds, error) to `out`."""
    start.wait()
    t = time.monotonic()
    status, err = None, None
    try:
        with socket.create_connection(addr, timeout=give_up) as s:
            s.sendall(head(addr, len(body)) + body)
            buf = b""
            while True:
                left = give_up - (time.monotonic() - t)
                if left <= 0:
                    raise TimeoutError("gave up")
                s.settimeout(left)
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError(f"closed before a reply: {buf[:200]!r}")
                buf += chunk
                r = reply_of(buf)
                if r:
                    status = r[0]
                    break
    except (OSError, TimeoutError, ConnectionError) as e:
        err = str(e) or type(e).__name__
    out.append((status, time.monotonic() - t, err))


class SlowClient(threading.Thread):
    """Declares a 10 MB body and sends one byte every `every` seconds until answered."""

    def __init__(self, addr, every, give_up):
        super().__init__(daemon=True)
        self.addr, self.every, self.give_up = addr, every, give_up
        self.status, self.kind, self.after = None, None, None
        self.sock = socket.create_connection(addr)
        self.sock.sendall(head(addr, 10_000_000) + b"\0")
        self.t0 = time.monotonic()
        self.stop = threading.Event()

    def run(self):
        buf = b""
        try:
            while not self.stop.is_set() and time.monotonic() - self.t0 < self.give_up:
                ready, _, _ = select.select([self.sock], [], [], self.every)
                if ready:
                    chunk = self.sock.recv(65536)
                    if not chunk:
                        break
                    buf += chunk
                    r = reply_of(buf)
                    if r:
                        self.status, self.after = r[0], time.monotonic() - self.t0
                        try:
                            self.kind = json.loads(r[1])["error"]["kind"]
                        except (ValueError, KeyError, TypeError):
                            pass
                        break
                else:
                    self.sock.sendall(b"\0")
        except OSError:
            r = reply_of(buf)
            if r:
                self.status, self.after = r[0], time.monotonic() - self.t0
        finally:
            self.sock.close()


# ---------------------------------------------------------------- the server

class Server:
    """`distributor serve` on 127.0.0.1:0, its stderr lines collected."""

    def __init__(self, bin_, root, extra):
        os.makedirs(root)
        dest = os.path.join(root, "dest")
        token_sha = hashlib.sha256(TOKEN.encode()).hexdigest()
        cfg = os.path.join(root, "bench.yaml")
        with open(cfg, "w") as f:
            f.write(f"version: 1\npipeline:\n  id: bench\n"
                    f"server:\n  upload_tokens:\n    - name: bench\n      sha256: \"{token_sha}\"\n"
                    f"destinations:\n  - id: latest\n    path: {dest}\n")
        self.spool = os.path.join(root, "spool")
        cmd = [bin_, "serve", "--config", cfg, "--listen", "127.0.0.1:0",
               "--spool", self.spool, "--journal", os.path.join(root, "journal.sqlite3")] + extra
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.listening = None
        ready = threading.Event()

        def read():
            for line in self.proc.stderr:
                try:
                    v = json.loads(line)
                except ValueError:
                    v = {"text": line}
                self.lines.append(v)
                if v.get("event") == "listening":
                    self.listening = v
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(60) or self.listening is None:
            self.proc.kill()
            raise SystemExit(f"the server did not start: {self.lines}")
        host, port = self.listening["address"].rsplit(":", 1)
        self.addr = (host, int(port))

    def spooled(self):
        return [n for n in os.listdir(self.spool) if n.startswith("req-")]

    def requests(self):
        return [v for v in self.lines if v.get("event") == "request"]

    def stop(self):
        self.proc.terminate()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# ---------------------------------------------------------------- scenarios

def pct(values, p):
    """Nearest-rank percentile."""
    if not values:
        return None
    v = sorted(values)
    return v[max(0, math.ceil(p / 100 * len(v)) - 1)]


def without_limits(argv):
    """`argv` without the flags OFF sets (clap refuses a flag given twice)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in OFF[::2]:
            skip = True
        elif not any(a.startswith(f + "=") for f in OFF[::2]):
            out.append(a)
    return out


def run_scenario(args, name, tars, slow_n):
    extra = without_limits(args.serve_arg) + OFF if name == "off" else list(args.serve_arg)
    give_up = args.off_give_up if name == "off" else args.give_up
    server = Server(args.bin, os.path.join(args.work, name), extra)
    slots = server.listening["max_concurrent_uploads"]
    log(f"{name}: {len(tars)} legitimate uploads, {slow_n} slow clients, "
        f"{slots} slots, window {server.listening['upload_rate_window_secs']:g} s, "
        f"min rate {server.listening['upload_min_rate']} B/s, "
        f"deadline {server.listening['upload_deadline_secs']:g} s")
    wall = time.monotonic()
    slow = [SlowClient(server.addr, args.trickle, give_up + 60) for _ in range(slow_n)]
    for c in slow:
        c.start()
    if slow:
        # The slow ones hold every slot, and the rest of them are queued, before the
        # first legitimate upload arrives.
        deadline = time.monotonic() + 30
        while len(server.spooled()) < min(slots, slow_n) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.5)
    start = threading.Event()
    results = []
    threads = [threading.Thread(target=legit_upload, args=(server.addr, t, give_up, start, results))
               for t in tars]
    for t in threads:
        t.start()
    start.set()
    for t in threads:
        t.join()
    legit_wall = time.monotonic() - wall
    for c in slow:
        if name == "off":
            c.stop.set()
        c.join(give_up + 120)
    wall = time.monotonic() - wall
    code = server.stop()
    logs = server.requests()
    ok = [secs for status, secs, _ in results if status == 200]
    errors = [err or f"status {status}" for status, _, err in results if status != 200]
    queued = [r["queued_ms"] / 1000 for r in logs if r.get("status") == 200 and "queued_ms" in r]
    cut = [c.after for c in slow if c.status == 408]
    row = dict(
        scenario=name, legit=len(tars), answered_200=len(ok), failures=len(errors),
        first_failures=errors[:3], p50_s=pct(ok, 50), p99_s=pct(ok, 99),
        max_s=max(ok) if ok else None, queued_p50_s=pct(queued, 50),
        queued_p99_s=pct(queued, 99), slow=slow_n,
        slow_408=sum(1 for c in slow if c.status == 408),
        slow_kinds=sorted({c.kind for c in slow if c.kind}),
        slow_cut_first_s=min(cut) if cut else None, slow_cut_last_s=max(cut) if cut else None,
        legit_wall_s=legit_wall, wall_s=wall, server_exit=code,
        spool_left=len(os.listdir(server.spool)) - 1,
    )
    log(f"{name}: {json.dumps(row)}")
    return row


def fmt(v):
    return "-" if v is None else f"{v:.2f} s"


def report(rows):
    print("| scenario | legitimate answered 200 | p50 | p99 | max | queued p50 / p99 "
          "| slow clients: 408 | slow cut after (first-last) | wall |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        cut = ("-" if r["slow_cut_first_s"] is None
               else f"{r['slow_cut_first_s']:.1f}-{r['slow_cut_last_s']:.1f} s")
        print(f"| {r['scenario']} | {r['answered_200']} / {r['legit']} | {fmt(r['p50_s'])} "
              f"| {fmt(r['p99_s'])} | {fmt(r['max_s'])} "
              f"| {fmt(r['queued_p50_s'])} / {fmt(r['queued_p99_s'])} "
              f"| {r['slow_408']} / {r['slow']} | {cut} | {r['wall_s']:.1f} s |")


class Load(threading.Thread):
    """Samples the load average every 10 s."""

    def __init__(self):
        super().__init__(daemon=True)
        self.samples = [os.getloadavg()[0]]
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(10):
            self.samples.append(os.getloadavg()[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="the distributor binary")
    ap.add_argument("--work", required=True, help="scratch directory (emptied first)")
    ap.add_argument("--quick", action="store_true", help="small sizes, a smoke run")
    ap.add_argument("--legit", type=int, help="legitimate uploads (200)")
    ap.add_argument("--slow", type=int, help="slow clients (20)")
    ap.add_argument("--files", type=int, help="files per upload (4)")
    ap.add_argument("--size", type=int, help="bytes per file (16384)")
    ap.add_argument("--trickle", type=float, default=2.0,
                    help="seconds between a slow client's bytes (2)")
    ap.add_argument("--scenarios", default="baseline,slow,off",
                    help="comma-separated: baseline, slow, off")
    ap.add_argument("--give-up", type=float, default=900,
                    help="seconds a legitimate upload waits for its reply (900)")
    ap.add_argument("--off-give-up", type=float, default=60,
                    help="the same in the off scenario (60)")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an argument for every server, e.g. --serve-arg=--upload-rate-window"
                         " --serve-arg=10 (repeat); default: the server's defaults")
    ap.add_argument("--raw", help="write every row as JSON to this file")
    args = ap.parse_args()
    sizes = dict(QUICK if args.quick else FULL)
    for k in sizes:
        if getattr(args, k) is not None:
            sizes[k] = getattr(args, k)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    load = Load()
    load.start()
    log(f"load average at start: {os.getloadavg()}, {os.cpu_count()} CPUs")
    tars = [bundle_tar(n, sizes["files"], sizes["size"]) for n in range(sizes["legit"])]
    rows = []
    for name in [s.strip() for s in args.scenarios.split(",") if s.strip()]:
        if name not in ("baseline", "slow", "off"):
            raise SystemExit(f"unknown scenario {name!r}; known: baseline, slow, off")
        rows.append(run_scenario(args, name, tars, 0 if name == "baseline" else sizes["slow"]))
    load.done.set()
    print(f"{sizes['legit']} legitimate uploads of {sizes['files']} x {sizes['size']} B "
          f"({len(tars[0])} B tar), {sizes['slow']} slow clients sending 1 byte every "
          f"{args.trickle:g} s; server flags: {' '.join(args.serve_arg) or 'defaults'}")
    print(f"load average (1 min) during the run: {min(load.samples):.2f}-"
          f"{max(load.samples):.2f}, at the end {os.getloadavg()[0]:.2f}; "
          f"{os.cpu_count()} CPUs\n")
    report(rows)
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump(dict(sizes=sizes, load=load.samples, rows=rows), f, indent=1)
    shutil.rmtree(args.work, ignore_errors=True)
    bad = [r for r in rows if r["scenario"] != "off" and r["failures"]]
    if bad:
        log("FAILED: legitimate uploads not answered 200: "
            + "; ".join(f"{r['scenario']}: {r['failures']} ({r['first_failures']})" for r in bad))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
