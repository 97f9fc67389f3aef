#!/usr/bin/env python3
"""Side-by-side benchmark of s3 destinations: `distributor publish` to `backend: s3`
against `aws s3 sync` and `rclone copy`, all against the same local S3 server in one
run: moto_server (`--server moto`, the default) or SeaweedFS (`--server seaweedfs`,
`weed mini`). Run through benches/s3.sh, which installs the tools and builds the release
binary.

One server serves the whole run (127.0.0.1, free ports). moto's state is reset
(`POST /moto-api/reset`, untimed) before each run that starts from an empty store, and
every tool gets a fresh bucket per run, so no run lists or writes another's objects.
Every scenario runs each tool several times, alternating the tools (the order rotates
each round), and reports medians.

Requests are counted, split into PUT, GET, HEAD, POST, DELETE and LIST (a GET on the
bucket itself), and reported per file of the bundle; "content PUTs" are PUTs of keys that
are not distributor's own (`.distributor*`): uploads, upload parts, and server-side copies
(a copy is a PUT with `x-amz-copy-source`, which the logs do not show). DeleteObjects is a
POST (`?delete`).
  moto      from its access log: Werkzeug logs one line per request, with its method and
            path, before the response goes out. Each run's requests are the lines between
            the log's size before the run and after it (once it stopped growing), for
            every timed run.
  seaweedfs SeaweedFS logs no line per request, so after the timed rounds every tool
            runs the scenario once more through tests/fixtures/s3_ignoring_proxy.py
            (`--keep-conditions`: it forwards every request unchanged and logs it), untimed.
            The counts of a scenario are the same in every round (see --raw of a moto run).

moto is a Python server on the same 2 cores: it dominates every time below, so seconds
are much longer than against a real store. SeaweedFS is a Go server that users run in
production, closer to a real store's costs. The ratios compare the three clients'
request patterns and their own overhead on the same server; the CPU time of each tool
and of the server per run is in --raw.

What each tool checks to skip a file that is already there:
  distributor   the state object and one listing of the prefix: a recorded output is
                unchanged when the listing shows its recorded size and ETag
  aws s3 sync   one listing: size, and local mtime not newer than the object's
                LastModified
  rclone copy   --fast-list (one recursive listing instead of one per directory) and
                --checksum (size and the listing's ETag as MD5, compared with the local
                file's MD5, instead of a HEAD per object to read the mtime rclone keeps
                in metadata); otherwise its defaults (4 transfers, 8 checkers, a HEAD of
                every uploaded object to check it, single PUTs up to 200 MiB)
aws and rclone leave distributor-manifest.json out (--exclude); distributor publishes
the manifest's outputs, not the manifest.

Scenarios:
  a  first publish of 10,000 files of 4 KiB in 100 directories
  b  republish of the same bundle (nothing changed)
  c  1% of the files (100) rewritten with new content, a new manifest (`distributor
     manifest`, newer created_at); the rewritten files' mtimes are set to now after the
     untimed publication of (a)'s bundle, as a build that wrote them would, so that
     aws s3 sync sees them as newer
  d  first publish of 4 files of 64 MiB

Goal (the issue): every scenario at most 1.0x the better of aws and rclone, and the
unchanged republish (b) with no PUT at all.
"""

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

FULL = dict(a_files=10_000, a_dirs=100, a_size=4096, d_files=4, d_size=64 << 20, reps=3)
QUICK = dict(a_files=500, a_dirs=10, a_size=4096, d_files=2, d_size=16 << 20, reps=3)

T0 = "2026-12-02T06:00:00Z"
T1 = "2026-12-02T07:00:00Z"
TOOLS = ["distributor", "aws", "rclone"]
# moto does not check signatures, but wants an Authorization header (without one a
# request is anonymous and refused).
AUTHORIZATION = ("AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, "
                 "SignedHeaders=host, Signature=" + "0" * 64)
METHODS = ["PUT", "GET", "HEAD", "POST", "DELETE", "LIST"]
PREFIX = "site"
ANSI = re.compile(rb"\x1b\[[0-9;]*m")
LINE = re.compile(rb'"(GET|PUT|HEAD|POST|DELETE) (\S+) HTTP/1\.[01]"')


def log(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- bundles

def write_tree(root, n, dirs, size):
    per = max(1, n // dirs)
    made = set()
    for i in range(n):
        d = os.path.join(root, f"d{i // per:04d}")
        if d not in made:
            os.makedirs(d, exist_ok=True)
            made.add(d)
        with open(os.path.join(d, f"f{i:06d}.bin"), "wb") as f:
            f.write(os.urandom(size))


def changed_copy(src, dst, fraction):
    """A copy of src keeping mtimes, with `fraction` of its files rewritten; returns the
    rewritten files' paths."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("distributor-manifest.json"))
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(dst) for f in fs)
    step = max(1, round(1 / fraction))
    changed = files[::step]
    for p in changed:
        size = os.path.getsize(p)
        with open(p, "wb") as f:
            f.write(os.urandom(size))
    return changed


# ---------------------------------------------------------------- moto

class Moto:
    """One moto_server for the whole run, and its access log."""

    name = "moto"
    # Every run's requests are in the server's own log.
    logs_requests = True

    def __init__(self, binary, work, env):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(work, "moto.log")
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen([binary, "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdin=subprocess.DEVNULL, stdout=self.log_file,
                                     stderr=self.log_file,
                                     env=dict(env, PYTHONUNBUFFERED="1"))
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"moto_server exited {self.proc.returncode}; see {self.log_path}")
            try:
                if self.request("GET", "/") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() - started > 30:
                self.stop()
                raise SystemExit(f"moto_server did not answer within 30 s; see {self.log_path}")
            time.sleep(0.1)

    def request(self, method, path):
        req = urllib.request.Request(self.endpoint + path, method=method,
                                     headers={"Authorization": AUTHORIZATION})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=120) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def reset(self):
        """Forgets every bucket (moto keeps objects in memory)."""
        status = self.request("POST", "/moto-api/reset")
        if status != 200:
            raise SystemExit(f"moto reset answered {status}")

    def create_bucket(self, name):
        status = self.request("PUT", f"/{name}")
        if status != 200:
            raise SystemExit(f"creating bucket {name} answered {status}")

    def offset(self):
        """The log's size once it has stopped growing (a request is logged as its
        response starts, so the last line of a run may trail its client's exit)."""
        size, still = os.path.getsize(self.log_path), 0
        deadline = time.monotonic() + 2
        while still < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
            now = os.path.getsize(self.log_path)
            still = still + 1 if now == size else 0
            size = now
        return size

    def requests(self, start, end):
        """Counts of the requests logged between two offsets."""
        with open(self.log_path, "rb") as f:
            f.seek(start)
            text = ANSI.sub(b"", f.read(end - start))
        counts = dict.fromkeys(METHODS + ["content_put", "total"], 0)
        for m in LINE.finditer(text):
            method, target = m.group(1).decode(), m.group(2).decode()
            path, _, _ = target.partition("?")
            key = path.lstrip("/").partition("/")[2]
            if method == "GET" and not key:
                method = "LIST"
            counts[method] += 1
            counts["total"] += 1
            if method == "PUT" and key and not key.startswith(f"{PREFIX}/.distributor"):
                counts["content_put"] += 1
        return counts

    def cpu(self):
        """moto's CPU seconds so far (user + system)."""
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log_file.close()


def free_ports(n):
    """n distinct free loopback ports (held together, released before use)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def count_lines(text, counts):
    """Adds the requests of log lines `METHOD TARGET ...` (the recording proxy's) to counts."""
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) < 2 or parts[0] not in ("GET", "PUT", "HEAD", "POST", "DELETE"):
            continue
        method, target = parts[0], parts[1]
        path, _, _ = target.partition("?")
        key = path.lstrip("/").partition("/")[2]
        if method == "GET" and not key:
            method = "LIST"
        counts[method] += 1
        counts["total"] += 1
        if method == "PUT" and key and not key.startswith(f"{PREFIX}/.distributor"):
            counts["content_put"] += 1


class SeaweedFS:
    """One `weed mini` (SeaweedFS 4.x: master, volume server, filer and S3 gateway in one
    process) for the whole run, on free loopback ports, its data under the work
    directory; and a recording proxy in front of it for the counted runs."""

    name = "seaweedfs"
    logs_requests = False

    def __init__(self, binary, work, env):
        ports = free_ports(10)
        self.port = ports[0]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.dir = os.path.join(work, "seaweedfs")
        os.makedirs(os.path.join(self.dir, "data"))
        config = os.path.join(self.dir, "s3.json")
        with open(config, "w") as f:
            # One identity with the benchmark's credentials, and `anonymous` for the
            # bucket creation below (unsigned requests).
            json.dump({"identities": [
                {"name": "bench", "credentials": [{"accessKey": "test", "secretKey": "test"}],
                 "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
                {"name": "anonymous", "actions": ["Admin", "Read", "Write", "List", "Tagging"]},
            ]}, f)
        names = ["s3.port", "s3.port.grpc", "master.port", "master.port.grpc", "volume.port",
                 "volume.port.grpc", "filer.port", "filer.port.grpc", "admin.port",
                 "admin.port.grpc"]
        args = [binary, "mini", f"-dir={self.dir}/data", "-ip=127.0.0.1", "-ip.bind=127.0.0.1"]
        args += [f"-{n}={p}" for n, p in zip(names, ports)]
        args += [f"-s3.config={config}", f"-filer.localSocket={self.dir}/filer.sock",
                 f"-s3.localSocket={self.dir}/s3.sock", "-s3.port.iceberg=0",
                 "-s3.port.lance=0", "-webdav=false", "-admin.ui=false",
                 "-master.telemetry=false", "-volume.max=1000"]
        self.log_path = os.path.join(work, "seaweedfs.log")
        self.log_file = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self.log_file,
                                     stderr=self.log_file, cwd=self.dir,
                                     env=dict(env, TMPDIR=self.dir))
        self.proxy = None
        started = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise SystemExit(f"weed exited {self.proc.returncode}; see {self.log_path}")
            try:
                if (self.request("PUT", "/bench-ready") in (200, 409)
                        and self.request("PUT", "/bench-ready/ready", b"ready") == 200):
                    break
            except OSError:
                pass
            if time.monotonic() - started > 60:
                self.stop()
                raise SystemExit(f"SeaweedFS did not answer within 60 s; see {self.log_path}")
            time.sleep(0.2)
        self.proxy_log = os.path.join(work, "proxy.log")
        open(self.proxy_log, "w").close()
        here = os.path.dirname(os.path.abspath(__file__))
        fixture = os.path.join(here, "..", "tests", "fixtures", "s3_ignoring_proxy.py")
        self.proxy = subprocess.Popen([sys.executable, fixture, self.endpoint, self.proxy_log,
                                       "--keep-conditions"],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        line = self.proxy.stdout.readline().decode().strip()
        if not line.isdigit():
            raise SystemExit(f"the recording proxy did not print its port (got {line!r})")
        self.counting_endpoint = f"http://127.0.0.1:{line}"

    def request(self, method, path, body=None):
        req = urllib.request.Request(self.endpoint + path, method=method, data=body)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(req, timeout=120) as r:
                r.read()
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    def reset(self):
        """Nothing: every run has a bucket of its own."""

    def create_bucket(self, name):
        status = self.request("PUT", f"/{name}")
        if status != 200:
            raise SystemExit(f"creating bucket {name} answered {status}")

    def offset(self):
        return os.path.getsize(self.proxy_log)

    def requests(self, start, end):
        with open(self.proxy_log, "rb") as f:
            f.seek(start)
            text = f.read(end - start).decode(errors="replace")
        counts = dict.fromkeys(METHODS + ["content_put", "total"], 0)
        count_lines(text, counts)
        return counts

    def cpu(self):
        with open(f"/proc/{self.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self):
        for p in (self.proxy, self.proc):
            if p is None:
                continue
            if p is self.proxy:
                p.stdin.close()
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.log_file.close()


# ---------------------------------------------------------------- tools

def clean_env():
    """This process's environment without anything that could point a tool elsewhere:
    no AWS_*, RCLONE_* or MOTO_* variable (a CA bundle or profile meant for real AWS),
    no proxy for 127.0.0.1."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("AWS_", "RCLONE_", "MOTO_"))}
    env.update(NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


class Bench:
    def __init__(self, args, work, sizes, moto):
        self.bin = os.path.abspath(args.bin)
        self.aws = os.path.abspath(args.aws)
        self.rclone = os.path.abspath(args.rclone)
        self.work = work
        self.s = sizes
        self.moto = moto
        self.n = 0
        base = clean_env()
        creds = dict(AWS_ACCESS_KEY_ID="test", AWS_SECRET_ACCESS_KEY="test", AWS_REGION="us-east-1")
        empty = os.path.join(work, "empty-config")
        open(empty, "w").close()
        self.env = {
            "distributor": dict(base, **creds),
            "aws": dict(base, **creds, AWS_CONFIG_FILE=empty, AWS_SHARED_CREDENTIALS_FILE=empty),
            "rclone": dict(base, RCLONE_CONFIG=empty,
                           RCLONE_CONFIG_MOTO_TYPE="s3", RCLONE_CONFIG_MOTO_PROVIDER="Other",
                           RCLONE_CONFIG_MOTO_ACCESS_KEY_ID="test",
                           RCLONE_CONFIG_MOTO_SECRET_ACCESS_KEY="test",
                           RCLONE_CONFIG_MOTO_REGION="us-east-1",
                           RCLONE_CONFIG_MOTO_FORCE_PATH_STYLE="true"),
        }
        self.anomalies = []

    def fresh(self, tag, tool, counted=False):
        """A run directory and a new bucket for one tool's run; `counted`: its requests go
        through the recording proxy (a server that logs none itself)."""
        self.n += 1
        d = os.path.join(self.work, "runs", f"{tag}-{tool}-{self.n}")
        os.makedirs(d)
        bucket = f"bench-{tag}-{tool}-{self.n}"
        self.moto.create_bucket(bucket)
        endpoint = self.moto.counting_endpoint if counted else self.moto.endpoint
        return {"dir": d, "bucket": bucket, "endpoint": endpoint, "counted": counted,
                "config": self.config(d, bucket, endpoint)}

    def config(self, run, bucket, endpoint):
        path = os.path.join(run, "config.yaml")
        with open(path, "w") as f:
            f.write("version: 1\npipeline:\n  id: bench\ndestinations:\n  - id: site\n"
                    f"    backend: s3\n    path: s3://{bucket}/{PREFIX}\n    s3:\n"
                    f"      endpoint: {endpoint}\n      allow_http: true\n")
        return path

    def command(self, tool, run, src):
        if tool == "distributor":
            return [self.bin, "publish", "--json", "--config", run["config"], "--source", src,
                    "--journal", os.path.join(run["dir"], "journal.sqlite3")]
        if tool == "aws":
            return [self.aws, "s3", "sync", src, f"s3://{run['bucket']}/{PREFIX}",
                    "--endpoint-url", run["endpoint"], "--only-show-errors",
                    "--exclude", "distributor-manifest.json"]
        return [self.rclone, "copy", src, f"moto:{run['bucket']}/{PREFIX}",
                "--fast-list", "--checksum", "--exclude", "/distributor-manifest.json"]

    def run(self, tool, run, src, expect=None):
        """Runs one tool once: wall seconds, its CPU seconds, moto's CPU seconds and the
        requests moto logged."""
        cmd = self.command(tool, run, src)
        start_log, start_cpu = self.moto.offset(), self.moto.cpu()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            t = time.perf_counter()
            env = dict(self.env[tool], RCLONE_CONFIG_MOTO_ENDPOINT=run["endpoint"])
            p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                 env=env)
            _, status, ru = os.wait4(p.pid, 0)
            secs = time.perf_counter() - t
            p.returncode = os.waitstatus_to_exitcode(status)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        moto_cpu = self.moto.cpu() - start_cpu
        counts = None
        if self.moto.logs_requests or run["counted"]:
            counts = self.moto.requests(start_log, self.moto.offset())
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}:\n{stderr.decode()}\n{stdout.decode()[:2000]}")
        if tool == "distributor" and expect:
            d = json.loads(stdout)["destinations"][0]
            if d["decision"] != expect:
                raise SystemExit(f"distributor: expected decision {expect}, got {d['decision']}: {d.get('message')}")
        return {"seconds": secs, "cpu": ru.ru_utime + ru.ru_stime, "moto_cpu": moto_cpu,
                "load1": os.getloadavg()[0], "requests": counts}

    def check(self, scenario, tool, r, want_content_puts):
        """Records a run whose PUTs are not what the scenario implies."""
        c = r["requests"]
        if c is None:
            return
        lo, hi = want_content_puts
        if not lo <= c["content_put"] <= hi:
            self.anomalies.append(f"{scenario}: {tool} made {c['content_put']} content PUTs "
                                  f"(expected {lo}..{hi}): {c}")
        if scenario == "b" and c["PUT"]:
            self.anomalies.append(f"b: {tool} made {c['PUT']} PUTs on an unchanged republish: {c}")


def rounds(reps, tools):
    """Yields (round, tool) with the order rotated every round."""
    for r in range(reps):
        k = r % len(tools)
        for t in tools[k:] + tools[:k]:
            yield r, t


def settle():
    subprocess.run(["sync"], check=True)


# ---------------------------------------------------------------- scenarios

def parts(size):
    """PUTs of one file: single up to 8 MiB, else parts of 8 MiB (distributor, aws) or one
    PUT up to 200 MiB (rclone)."""
    return max(1, -(-size // (8 << 20)))


def shown(r):
    return "" if r["requests"] is None else f"{r['requests']['total']:6} requests"


def counted(b, runs, once):
    """On a server that logs no requests, `once(tool)` runs each tool one more time
    through the recording proxy (untimed) and its counts stand for every timed run."""
    if b.moto.logs_requests:
        return runs
    for tool in TOOLS:
        r = once(tool)
        log(f"  {tool:12} counted through the proxy: {r['requests']['total']} requests")
        for t in runs[tool]:
            t["requests"] = dict(r["requests"])
            t["requests_from"] = "proxy"
    return runs


def scenario_first(b, key, src, reps, files, size):
    runs = {t: [] for t in TOOLS}
    for _, tool in rounds(reps, TOOLS):
        b.moto.reset()
        run = b.fresh(key, tool)
        settle()
        r = b.run(tool, run, src, "create")
        b.check(key, tool, r, (files, files * parts(size)))
        runs[tool].append(r)
        log(f"  {tool:12} {r['seconds']:8.3f} s  {shown(r)}")
    b.moto.reset()

    def once(tool):
        r = b.run(tool, b.fresh(key, tool, counted=True), src, "create")
        b.check(key, tool, r, (files, files * parts(size)))
        return r
    return counted(b, runs, once)


def scenario_republish(b, src, reps):
    b.moto.reset()
    prepared = {}
    for tool in TOOLS:
        run = b.fresh("b", tool)
        b.run(tool, run, src, "create")
        prepared[tool] = run
    runs = {t: [] for t in TOOLS}
    for _, tool in rounds(reps, TOOLS):
        settle()
        r = b.run(tool, prepared[tool], src, "unchanged")
        b.check("b", tool, r, (0, 0))
        runs[tool].append(r)
        log(f"  {tool:12} {r['seconds']:8.3f} s  {shown(r)}")
    b.moto.reset()

    def once(tool):
        run = b.fresh("b", tool, counted=True)
        b.run(tool, run, src, "create")
        r = b.run(tool, run, src, "unchanged")
        b.check("b", tool, r, (0, 0))
        return r
    return counted(b, runs, once)


def scenario_changed(b, a_src, c_src, changed, reps):
    def one(tool, counted_run):
        run = b.fresh("c", tool, counted=counted_run)
        b.run(tool, run, a_src, "create")
        # Written after the last publication, as a build that changed them would.
        now = time.time()
        for p in changed:
            os.utime(p, (now, now))
        settle()
        r = b.run(tool, run, c_src, "replace_older")
        b.check("c", tool, r, (len(changed), 2 * len(changed)))
        return r

    runs = {t: [] for t in TOOLS}
    for _, tool in rounds(reps, TOOLS):
        b.moto.reset()
        r = one(tool, False)
        runs[tool].append(r)
        log(f"  {tool:12} {r['seconds']:8.3f} s  {shown(r)}")
    b.moto.reset()
    return counted(b, runs, lambda tool: one(tool, True))


def warm_up(b, work):
    """One untimed publish of one file by every tool: loads each program from disk."""
    src = os.path.join(work, "bundles", "warm")
    write_tree(src, 1, 1, 16)
    manifest(b, src, "warm", T0)
    b.moto.reset()
    for tool in TOOLS:
        b.run(tool, b.fresh("w", tool), src, "create")
    b.moto.reset()


def manifest(b, root, bundle_id, created_at):
    subprocess.run([b.bin, "manifest", "--id", bundle_id, "--created-at", created_at, root],
                   check=True, stdout=subprocess.DEVNULL)


# ---------------------------------------------------------------- report

def med(xs):
    return statistics.median(xs) if xs else None


def ratio(a, b):
    return a / b if (a is not None and b) else None


def fmt_x(v):
    return "n/a" if v is None else f"{v:.2f}x"


def per_file(runs, field, files):
    return med([r["requests"][field] for r in runs]) / files


def fmt_per(v):
    return f"{v:.4f}".rstrip("0").rstrip(".") if v else "0"


def report(rows):
    print("| scenario | distributor | aws s3 sync | rclone copy | distributor/aws | distributor/rclone "
          "| requests per file (distributor / aws / rclone) | PUTs per file (distributor / aws / rclone) "
          "| distributor / the faster of the two (goal <= 1.0x) | met |")
    print("|---" * 10 + "|")
    for key, label, runs, files in rows:
        sec = {t: med([r["seconds"] for r in runs[t]]) for t in TOOLS}
        paired = {o: med([d["seconds"] / x["seconds"] for d, x in zip(runs["distributor"], runs[o])])
                  for o in ("aws", "rclone")}
        da, dr = ratio(sec["distributor"], sec["aws"]), ratio(sec["distributor"], sec["rclone"])
        req = " / ".join(fmt_per(per_file(runs[t], "total", files)) for t in TOOLS)
        put = " / ".join(fmt_per(per_file(runs[t], "PUT", files)) for t in TOOLS)
        # The better of aws and rclone is the faster one: the larger of the two ratios.
        best = max(da, dr)
        ok = best <= 1.0
        if key == "b":
            puts = med([r["requests"]["PUT"] for r in runs["distributor"]])
            ok = ok and puts == 0
        print(f"| {label} | {sec['distributor']:.2f} s | {sec['aws']:.2f} s | {sec['rclone']:.2f} s "
              f"| {fmt_x(da)} ({fmt_x(paired['aws'])}) | {fmt_x(dr)} ({fmt_x(paired['rclone'])}) "
              f"| {req} | {put} | {fmt_x(best)}{', no PUT' if key == 'b' else ''} | {'yes' if ok else 'NO'} |")


def report_requests(rows):
    """Median requests per run by kind, and CPU seconds of the tool and of the server."""
    print("| scenario | tool | " + " | ".join(METHODS) + " | content PUTs | total | tool CPU | server CPU |")
    print("|---" * (len(METHODS) + 6) + "|")
    for key, _, runs, _ in rows:
        for t in TOOLS:
            rs = runs[t]
            cells = " | ".join(f"{med([r['requests'][m] for r in rs]):g}" for m in METHODS)
            print(f"| {key} | {t} | {cells} | {med([r['requests']['content_put'] for r in rs]):g} "
                  f"| {med([r['requests']['total'] for r in rs]):g} "
                  f"| {med([r['cpu'] for r in rs]):.2f} s | {med([r['moto_cpu'] for r in rs]):.2f} s |")


def print_tables(rows, anomalies):
    report(rows)
    print()
    print("Requests and PUTs per file of the bundle; in (c) per changed file. In brackets: the median "
          "of the per-round ratios.")
    print()
    print("Median requests per run, by kind (LIST: a GET on the bucket; POST includes "
          "DeleteObjects and multipart start/complete), and CPU seconds per run:")
    print()
    report_requests(rows)
    print()
    for a in anomalies:
        print(f"ANOMALY: {a}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", help="distributor release binary")
    ap.add_argument("--server", choices=["moto", "seaweedfs"], default="moto",
                    help="the S3 server every tool publishes to (default moto)")
    ap.add_argument("--moto", help="moto_server (moto[server] 5.2.5), for --server moto")
    ap.add_argument("--weed", help="weed (SeaweedFS 4.x), for --server seaweedfs")
    ap.add_argument("--aws", help="aws (awscli)")
    ap.add_argument("--rclone", help="rclone")
    ap.add_argument("--work", help="scratch directory (emptied first)")
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    ap.add_argument("--only", default="abcd", help="scenarios to run, e.g. 'bc'")
    ap.add_argument("--reps", type=int, help="runs per tool (default 3)")
    ap.add_argument("--raw", help="also write every run's seconds, CPU and requests to this JSON file")
    ap.add_argument("--from-raw", metavar="FILE",
                    help="run nothing: print the tables of a file --raw wrote")
    args = ap.parse_args()
    if args.from_raw:
        with open(args.from_raw) as f:
            raw = json.load(f)
        print_tables([(k, v["label"], v["runs"], v["files"]) for k, v in raw["scenarios"].items()],
                     raw["anomalies"])
        return
    server_bin = "moto" if args.server == "moto" else "weed"
    for name in ("bin", server_bin, "aws", "rclone", "work"):
        if not getattr(args, name):
            ap.error(f"--{name} is required (or --from-raw)")
    s = dict(QUICK if args.quick else FULL)
    if args.reps:
        s["reps"] = args.reps
    for name in ("bin", server_bin, "aws", "rclone"):
        if not os.access(getattr(args, name), os.X_OK):
            raise SystemExit(f"--{name} {getattr(args, name)} is not an executable file")
    work = os.path.abspath(args.work)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "bundles"))
    started = time.perf_counter()
    load_start = os.getloadavg()
    if args.server == "moto":
        moto = Moto(os.path.abspath(args.moto), work, clean_env())
    else:
        moto = SeaweedFS(os.path.abspath(args.weed), work, clean_env())
    try:
        b = Bench(args, work, s, moto)
        log(f"{moto.name} on {moto.endpoint}; generating bundles ...")
        a_src = os.path.join(work, "bundles", "a")
        write_tree(a_src, s["a_files"], s["a_dirs"], s["a_size"])
        manifest(b, a_src, "bench", T0)
        c_src = os.path.join(work, "bundles", "c")
        changed = changed_copy(a_src, c_src, 0.01)
        manifest(b, c_src, "bench", T1)
        warm_up(b, work)
        rows = []
        R, n = s["reps"], s["a_files"]
        if "a" in args.only:
            label = f"a: first publish, {n} x {s['a_size'] // 1024} KiB in {s['a_dirs']} dirs"
            log(label)
            rows.append(("a", label, scenario_first(b, "a", a_src, R, n, s["a_size"]), n))
        if "b" in args.only:
            label = "b: republish, nothing changed"
            log(label)
            rows.append(("b", label, scenario_republish(b, a_src, R), n))
        if "c" in args.only:
            label = f"c: {len(changed)} of {n} files changed"
            log(label)
            rows.append(("c", label, scenario_changed(b, a_src, c_src, changed, R), len(changed)))
        if "d" in args.only:
            label = f"d: first publish, {s['d_files']} x {s['d_size'] >> 20} MiB"
            log(label)
            d_src = os.path.join(work, "bundles", "d")
            os.makedirs(d_src)
            for i in range(s["d_files"]):
                with open(os.path.join(d_src, f"big{i}.bin"), "wb") as f:
                    f.write(os.urandom(s["d_size"]))
            manifest(b, d_src, "big", T0)
            rows.append(("d", label, scenario_first(b, "d", d_src, R, s["d_files"], s["d_size"]),
                         s["d_files"]))
    finally:
        moto.stop()
    load_end = os.getloadavg()

    print()
    print_tables(rows, b.anomalies)
    print(f"runs per tool: {R}; total benchmark time {time.perf_counter() - started:.0f} s; "
          f"load average (1, 5, 15 min) at start {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}, "
          f"at end {load_end[0]:.2f} {load_end[1]:.2f} {load_end[2]:.2f}")
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump({"server": args.server,
                   "binaries": {"distributor": b.bin, "aws": b.aws, "rclone": b.rclone,
                                args.server: os.path.abspath(getattr(args, server_bin))},
                       "sizes": s, "load_start": load_start, "load_end": load_end,
                       "anomalies": b.anomalies,
                       "scenarios": {key: {"label": label, "files": files, "runs": runs}
                                     for key, label, runs, files in rows}}, f, indent=1)
    shutil.rmtree(os.path.join(work, "runs"), ignore_errors=True)


if __name__ == "__main__":
    main()
