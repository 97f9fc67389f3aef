#!/usr/bin/env bash
# Benchmark: distributor publishing to an s3 destination, side by side with
# `aws s3 sync` (awscli from pip) and `rclone copy` (Debian's rclone), all against one local
# moto_server (SPEC §14). Runs on a fresh machine: installs what is missing (moto_server
# in target/ci-venv as .ci/run does, awscli in target/bench-venv, rclone through apt),
# builds the release binary, then hands over to benches/s3.py.
#
#   benches/s3.sh                  full run (about 20-30 minutes on 2 cores)
#   benches/s3.sh --quick          small sizes, a smoke run of a few minutes
#   benches/s3.sh --only bc        some scenarios only
#   benches/s3.sh --reps 5 --raw runs.json   more runs per tool; every run's seconds and
#                                  request counts as JSON
#   benches/s3.sh --moto /work/other/target/ci-venv/bin/moto_server
#                                  use a moto_server installed elsewhere (MOTO_SERVER too)
#
# The binary measured is the one this script builds from this checkout:
# target/release/distributor, or $CARGO_TARGET_DIR/release/distributor when that is set.
# Every other option goes through to benches/s3.py (python3 benches/s3.py --help).
#
# Scratch data goes to target/bench-s3 (BENCH_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
MOTO_VERSION=5.2.5
AWSCLI_VERSION=1.46.2
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi

apt_install() {
  $SUDO apt-get install -y "$@" >/dev/null 2>&1 || { $SUDO apt-get update >/dev/null && $SUDO apt-get install -y "$@" >/dev/null; }
}

# A venv under target/ holding one pinned pip package; made again when it holds another
# version.
venv_with() {
  local venv=$1 check=$2 spec=$3
  if ! "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
    rm -rf "$venv"
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      # Debian's python3 makes venvs only with python3-venv.
      rm -rf "$venv"
      apt_install python3-venv
      python3 -m venv "$venv"
    fi
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input "$spec"
  fi
}

command -v python3 >/dev/null 2>&1 || { echo "benches/s3.sh: python3 is required" >&2; exit 2; }
command -v rclone >/dev/null 2>&1 || apt_install rclone

moto="${MOTO_SERVER:-}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --moto) moto=$2; shift 2 ;;
    --moto=*) moto=${1#--moto=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [ -z "$moto" ]; then
  venv_with target/ci-venv \
    "import sys, moto, flask; sys.exit(moto.__version__ != '$MOTO_VERSION')" \
    "moto[server]==$MOTO_VERSION"
  moto=target/ci-venv/bin/moto_server
fi
venv_with target/bench-venv \
  "import sys, awscli; sys.exit(awscli.__version__ != '$AWSCLI_VERSION')" \
  "awscli==$AWSCLI_VERSION"

cargo build --release --locked --quiet
exec python3 benches/s3.py --bin "${CARGO_TARGET_DIR:-target}/release/distributor" \
  --moto "$moto" --aws target/bench-venv/bin/aws --rclone "$(command -v rclone)" \
  --work "${BENCH_DIR:-target/bench-s3}" ${args[@]+"${args[@]}"}
