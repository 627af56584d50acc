#!/usr/bin/env bash
# Install fabperf on a fresh Debian/Ubuntu machine and run the quick suite.
#   sudo ./install.sh            # deps + release build + /usr/local/bin/fabperf + `fabperf suite`
#   sudo ./install.sh --no-suite # same without running the suite
set -euo pipefail
cd "$(dirname "$0")"
RUN_SUITE=1
for a in "$@"; do
  case "$a" in
    --no-suite) RUN_SUITE=0 ;;
    *) echo "usage: $0 [--no-suite]" >&2; exit 2 ;;
  esac
done
./ci/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --locked -p fabperf
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO install -m 0755 target/release/fabperf /usr/local/bin/fabperf
echo "installed /usr/local/bin/fabperf ($(/usr/local/bin/fabperf --version))"
if [ "$RUN_SUITE" = 1 ]; then
  /usr/local/bin/fabperf suite
fi
