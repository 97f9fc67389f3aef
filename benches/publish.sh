#!/usr/bin/env bash
# Benchmark: distributor publish side by side with rsync -a --delete + sync -f and
# cp -a + sync -f (issue 6). Runs on a fresh machine: installs rsync through apt when it
# is missing, builds the release binary, then hands over to benches/publish.py.
#
#   benches/publish.sh            full run (about 5-10 minutes)
#   benches/publish.sh --quick    small sizes, a smoke run of about a minute
#   benches/publish.sh --only ad  some scenarios only
#   benches/publish.sh --baseline /work/target-base/release/distributor
#                                 also runs a second build (here one of an older commit) as
#                                 "baseline" in the same alternating rounds, each run on its
#                                 own fresh destination like every tool; the table adds its
#                                 medians, ratios to rsync and cp, distributor/baseline and
#                                 its peak RSS (about twice as long as a run without)
#   benches/publish.sh --reps 7 --raw runs.json   more runs per tool; every run's seconds
#
# The binary measured as "distributor" is the one this script builds from this checkout:
# target/release/distributor, or $CARGO_TARGET_DIR/release/distributor when that is set
# (a relative path is taken from the repository's root, as is a relative --baseline). Build
# the baseline yourself first, in a worktree with its own target directory, e.g.
#   git worktree add /work/wt-base OLD_COMMIT
#   (cd /work/wt-base && CARGO_TARGET_DIR=/work/target-base cargo build --release --locked)
# Every other option goes through to benches/publish.py (python3 benches/publish.py --help).
#
# Scratch data goes to target/bench (BENCH_DIR overrides; it must be a local filesystem,
# the one you publish to in production if you want numbers that mean something there).
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in rsync python3 sync cp; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$tool" = rsync ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get install -y rsync >/dev/null || { apt-get update >/dev/null && apt-get install -y rsync >/dev/null; }
    else
      echo "benches/publish.sh: $tool is required" >&2
      exit 2
    fi
  fi
done
cargo build --release --locked --quiet --bin distributor --example floor --example floor_first
exec python3 benches/publish.py --bin "${CARGO_TARGET_DIR:-target}/release/distributor" \
  --floor "${CARGO_TARGET_DIR:-target}/release/examples/floor" \
  --floor-first "${CARGO_TARGET_DIR:-target}/release/examples/floor_first" \
  --work "${BENCH_DIR:-target/bench}" "$@"
