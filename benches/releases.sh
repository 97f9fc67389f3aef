#!/usr/bin/env bash
# Benchmark: publications into a destination with `releases` (SPEC §15) against the same
# publications in place, in one alternating run: 1% of 10,000 files changed (goal: at
# most 1.3x in place; rsync -a --delete + sync -f as a reference), nothing changed but a
# newer created_at (every file hard-linked: the cost of building a release; cp -al +
# sync -f as a reference), and the disk used per retained release. Installs rsync through
# apt when it is missing, builds the release binary, then hands over to
# benches/releases.py.
#
#   benches/releases.sh                  full run (about 10 minutes)
#   benches/releases.sh --quick          small sizes, a smoke run of about a minute
#   benches/releases.sh --reps 9 --raw runs.json   more rounds; every run's seconds and
#                                        the disk figures as JSON
#   benches/releases.sh --versions 10    more retained releases in the disk scenario
#
# The binary is built in its own target directory, /work/target-bench-rel, unless
# CARGO_TARGET_DIR says otherwise (a relative path is taken from the repository's root),
# so that the benchmark's build does not wait on or disturb other builds. Every option
# goes through to benches/releases.py (python3 benches/releases.py --help).
#
# Scratch data goes to target/bench-releases (BENCH_DIR overrides; it must be a local
# filesystem, the one you publish to in production if you want numbers that mean
# something there). Hard links never cross filesystems: releases.dir is beside path there.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in rsync python3 sync cp du; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    if [ "$tool" = rsync ] && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
      apt-get install -y rsync >/dev/null || { apt-get update >/dev/null && apt-get install -y rsync >/dev/null; }
    else
      echo "benches/releases.sh: $tool is required" >&2
      exit 2
    fi
  fi
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/target-bench-rel}"
cargo build --release --locked --quiet
exec python3 benches/releases.py --bin "$CARGO_TARGET_DIR/release/distributor" \
  --work "${BENCH_DIR:-target/bench-releases}" "$@"
