#!/usr/bin/env bash
# Benchmark: `distributor serve` under slow clients (issue 16, item 5). 200 legitimate
# uploads at once plus 20 token-holding clients that trickle one byte every 2 s; every
# legitimate upload must be answered (200), and the table gives their latency (p50, p99),
# how long they queued for a slot, and the slow clients' 408s. Scenarios: the legitimate
# uploads alone, with the slow clients holding every slot first, and the same with the
# limits off (the server as it was before --upload-min-rate and --upload-deadline). Builds
# the release binary, then hands over to benches/serve.py.
#
#   benches/serve.sh                       full run with the server's defaults (about 5
#                                          minutes: the slow clients are cut 30 s after
#                                          they get a slot, four at a time)
#   benches/serve.sh --quick               40 uploads, 8 slow clients, a smoke run
#   benches/serve.sh --scenarios slow      some scenarios only (baseline, slow, off)
#   benches/serve.sh --serve-arg=--upload-rate-window --serve-arg=10
#                                          server flags for every scenario
#   benches/serve.sh --raw rows.json       every figure as JSON
#
# The binary is built in its own target directory, /work/target-bench-serve, unless
# CARGO_TARGET_DIR says otherwise (a relative path is taken from the repository's root),
# so that the benchmark's build does not wait on or disturb other builds. Every option
# goes through to benches/serve.py (python3 benches/serve.py --help).
#
# Scratch data (configs, destinations, journals, spools) goes to target/bench-serve
# (BENCH_DIR overrides) and is removed at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null 2>&1; then
  echo "benches/serve.sh: python3 is required" >&2
  exit 2
fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-bench-serve}"
cargo build --release --locked --quiet
exec python3 benches/serve.py --bin "$CARGO_TARGET_DIR/release/distributor" \
  --work "${BENCH_DIR:-target/bench-serve}" "$@"
