# shellcheck shell=bash
# The check harness of the testbed test scripts (sourced after TB is set):
# pass/fail counters, `check NAME CMD...`, the root check, the fabperf binary
# (FABPERF_BIN, else target/release/fabperf, built when missing), a work
# directory kept when a check failed, and `tb_test_finish` for the EXIT trap,
# which also takes the testbed down.

PASSED=0
FAILED=0
ok() { PASSED=$((PASSED + 1)); printf 'ok    %s\n' "$*"; }
bad() { FAILED=$((FAILED + 1)); printf 'FAIL  %s\n' "$*"; }
section() { printf '\n== %s\n' "$*"; }
check() { # NAME CMD...: CMD succeeds
    local name=$1
    shift
    if "$@"; then ok "$name"; else bad "$name"; fi
}

# tb_test_begin NAME: exits unless root; sets WORK and FABPERF (exported as
# FABPERF_BIN for sim/testbed.sh).
tb_test_begin() {
    local name=$1 repo
    repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)
    if [[ $(id -u) -ne 0 ]]; then
        echo "$name: needs root (network namespaces); run it with sudo" >&2
        exit 1
    fi
    WORK=$(mktemp -d "/tmp/fabperf-$name.XXXXXX")
    FABPERF=${FABPERF_BIN:-}
    if [[ -z $FABPERF ]]; then
        FABPERF=${CARGO_TARGET_DIR:-$repo/target}/release/fabperf
        [[ -x $FABPERF ]] || (cd "$repo" && cargo build --release -p fabperf) || exit 1
    fi
    export FABPERF_BIN=$FABPERF
}

tb_test_finish() {
    "$TB" down >/dev/null 2>&1 || true
    if [[ $FAILED -eq 0 ]]; then rm -rf "$WORK"; else echo "logs and stores kept in $WORK"; fi
    printf '\n%d passed, %d failed\n' "$PASSED" "$FAILED"
    [[ $FAILED -eq 0 ]]
}
