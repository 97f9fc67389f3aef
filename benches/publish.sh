#!/usr/bin/env bash
# Benchmark: distributor publish side by side with rsync -a --delete + sync -f and
# cp -a + sync -f (issue 6). Runs on a fresh machine: installs rsync through apt when it
# is missing, builds the release binary, then hands over to benches/publish.py.
#
#   benches/publish.sh            full run (about 5-10 minutes)
#   benches/publish.sh --quick    small sizes, a smoke run of about a minute
#   benches/publish.sh --only ad  some scenarios only
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
cargo build --release --locked --quiet
exec python3 benches/publish.py --bin target/release/distributor --work "${BENCH_DIR:-target/bench}" "$@"
