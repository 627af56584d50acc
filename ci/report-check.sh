#!/usr/bin/env bash
# End-to-end checks of `fabperf report` and `fabperf export --format openmetrics` on the
# fixture store the golden tests use (crates/fabperf-report/tests/common):
#   - exit status: 0 when every gate holds, 1 with the violations listed, 2 for a malformed
#     gate (the column named), an unknown preset, a bad --baseline, a store that is not one;
#   - the HTML in headless Chromium (Debian `chromium`): every chart is in the DOM and the
#     console has no error; a page with a broken SVG attribute and an external load is
#     caught (the check can fail);
#   - the OpenMetrics text accepted by prometheus_client's strict parser (PyPI, pinned), a
#     broken exposition rejected; the push body accepted by its text-format parser, sent by
#     `--push` to a fake Pushgateway on 127.0.0.1; a gateway error exits non-zero;
#   - the Grafana dashboard (dashboards/fabperf.json) queries only families fabperf exports.
#
#   ./ci/report-check.sh [--screenshot OUT.png]
#
# Env: FABPERF_BIN=path to a built fabperf (default: cargo build -p fabperf, debug).
# Prints one line per check and "N passed, N failed"; exit 1 on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

SHOT=
case "${1:-}" in
  --screenshot) SHOT="${2:?--screenshot needs a file}" ;;
  "") ;;
  *) echo "usage: $0 [--screenshot OUT.png]" >&2; exit 2 ;;
esac

PC_VERSION=0.26.0   # prometheus-client on PyPI
VENV="${FABPERF_REPORT_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fabperf/report-check-$PC_VERSION}"
if ! "$VENV/bin/python" -c "import prometheus_client" 2>/dev/null; then
  echo "installing prometheus-client==$PC_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet --disable-pip-version-check "prometheus-client==$PC_VERSION" \
    || { echo "FAIL  cannot install prometheus-client (python3-venv and PyPI needed)"; echo "0 passed, 1 failed"; exit 1; }
fi
PY="$VENV/bin/python"

if [ -n "${FABPERF_BIN:-}" ]; then
  FP="$FABPERF_BIN"
else
  cargo build --quiet --locked -p fabperf || exit 1
  FP="${CARGO_TARGET_DIR:-target}/debug/fabperf"
fi
CHROMIUM="$(command -v chromium || command -v chromium-browser || true)"

PASSED=0; FAILED=0
ok() { PASSED=$((PASSED + 1)); printf 'ok    %s\n' "$*"; }
bad() { FAILED=$((FAILED + 1)); printf 'FAIL  %s\n' "$*"; }

tmp="$(mktemp -d)"
GW_PID=
cleanup() {
  if [ -n "$GW_PID" ]; then kill "$GW_PID" 2>/dev/null; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

cargo run --quiet --locked -p fabperf-report --example fixture_store -- "$tmp/fx.db" >/dev/null || exit 1

# expect RC NAME CMD...: CMD exits RC; output in $tmp/out, errors in $tmp/err.
expect() {
  local want="$1" name="$2"; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  if [ "$rc" = "$want" ]; then ok "$name (exit $rc)"; else bad "$name: exit $rc, wanted $want: $(head -c 400 "$tmp/err")"; fi
}
has() { # has FILE TEXT NAME
  if grep -qF -- "$2" "$1"; then ok "$3"; else bad "$3: no '$2' in $(basename "$1")"; fi
}

echo "== fabperf report: exit status and output"
expect 0 "report, no gate" "$FP" report --db "$tmp/fx.db"
has "$tmp/out" "−41 % vs host at 128 KiB" "verdict in words for the overlay path"
has "$tmp/out" "SUSPECT NODE n3" "mesh summary names the slow node"
expect 0 "gates that hold" "$FP" report --db "$tmp/fx.db" --gate 'path:host tcp-lat p99 <= 60us' --gate 'direction:forward incast jain >= 0.85'
has "$tmp/err" "all 2 gate(s) hold" "gates summary on stderr"
expect 1 "a violated gate" "$FP" report --db "$tmp/fx.db" --gate 'path:overlay tcp-bw >= 0.8 * path:host'
has "$tmp/out" "measured 5.60 Gbit/s, required >= 7.60 Gbit/s" "violation: measured vs required"
has "$tmp/out" "bw-overlay-131072-r0" "violation names the cells"
expect 1 "a violated gate, JSON on stdout, violations on stderr" "$FP" report --db "$tmp/fx.db" --format json --gate 'mesh outliers == 0'
if "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["gates"][0]["violations"]' "$tmp/out"; then ok "JSON carries the gate outcome"; else bad "JSON gate outcome"; fi
has "$tmp/err" "n1->n3 1.00" "stderr lists the mesh outliers"
expect 2 "a malformed gate" "$FP" report --db "$tmp/fx.db" --gate 'rdma-bw >= 90% prot_rate'
has "$tmp/err" "column 16" "the error names the column"
expect 2 "an unknown preset" "$FP" report --db "$tmp/fx.db" --gate-preset nope
expect 0 "preset list (no store needed)" "$FP" report --gate-preset list
has "$tmp/out" "connectx-acceptance" "the shipped preset is listed"
expect 0 "connectx-acceptance on the fixture (RDMA at 94 % of 25 Gbit/s)" "$FP" report --db "$tmp/fx.db" --gate-preset connectx-acceptance --format csv
expect 2 "an unknown --baseline" "$FP" report --db "$tmp/fx.db" --baseline nowhere
expect 2 "no such store" "$FP" report --db "$tmp/missing.db"
expect 2 "an HTML path that cannot be written" "$FP" report --db "$tmp/fx.db" --html "$tmp/no/such/dir/r.html"
printf 'not sqlite\n' >"$tmp/junk.db"
expect 2 "a file that is not a store" "$FP" report --db "$tmp/junk.db"
expect 0 "--compare-unlike" "$FP" report --db "$tmp/fx.db" --compare-unlike
has "$tmp/out" "== HTTP load" "http-load table"
has "$tmp/out" "50 B less than host" "MTU table names the overlay overhead"
expect 0 "markdown" "$FP" report --db "$tmp/fx.db" --format markdown
has "$tmp/out" "| test | size |" "markdown table"
expect 0 "csv to a file" "$FP" report --db "$tmp/fx.db" --format csv -o "$tmp/r.csv"
has "$tmp/r.csv" "run_id,family,test" "csv header"

echo "== HTML in headless Chromium"
expect 0 "report --html" "$FP" report --db "$tmp/fx.db" --html "$tmp/r.html" --gate 'mesh outliers <= 3'
if [ -z "$CHROMIUM" ]; then
  bad "chromium not installed (ci/install-deps.sh installs Debian's chromium)"
else
  # chrome FILE PREFIX: DOM in PREFIX.dom, console lines in PREFIX.console
  chrome() {
    rm -rf "$tmp/profile"
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
      --disable-component-update --disable-sync --no-first-run --user-data-dir="$tmp/profile" \
      --enable-logging=stderr --v=0 --dump-dom "file://$1" >"$2.dom" 2>"$2.log"
    grep -E ':CONSOLE[:(]|Uncaught' "$2.log" >"$2.console"
  }
  chrome "$tmp/r.html" "$tmp/r"
  for id in bandwidth udp latency-1 mesh-1; do
    has "$tmp/r.dom" "data-chart=\"$id\"" "chart $id rendered"
  done
  bars=$(grep -o 'class="bar"' "$tmp/r.dom" | wc -l)
  if [ "$bars" -ge 7 ]; then ok "bandwidth and UDP bars ($bars)"; else bad "only $bars bars"; fi
  cells=$(grep -o 'class="cell"' "$tmp/r.dom" | wc -l)
  if [ "$cells" = 16 ]; then ok "4x4 mesh heat-map"; else bad "heat-map has $cells cells, wanted 16"; fi
  if [ -s "$tmp/r.console" ]; then bad "console errors: $(head -c 600 "$tmp/r.console")"; else ok "no console message"; fi
  # Negative control: the same check must see a broken SVG and a blocked load.
  cat >"$tmp/broken.html" <<'HTML'
<!DOCTYPE html><html><head><meta charset="utf-8"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src data:"></head>
<body><svg width="10" height="10"><path d="M 1 1 L x"/></svg><img src="file:///nonexistent.png"></body></html>
HTML
  chrome "$tmp/broken.html" "$tmp/b"
  if [ "$(wc -l <"$tmp/b.console")" -ge 2 ]; then ok "negative control: a broken page's console errors are caught"; else bad "negative control not caught: $(cat "$tmp/b.log" | head -c 400)"; fi
  if [ -n "$SHOT" ]; then
    rm -rf "$tmp/profile"
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-background-networking \
      --disable-component-update --disable-sync --no-first-run --user-data-dir="$tmp/profile" \
      --hide-scrollbars --window-size=1280,2400 --screenshot="$SHOT" "file://$tmp/r.html" >/dev/null 2>&1 \
      && ok "screenshot $SHOT" || bad "screenshot"
  fi
fi

echo "== OpenMetrics"
expect 0 "export --format openmetrics" "$FP" export --db "$tmp/fx.db" --format openmetrics -o "$tmp/fx.om"
if "$PY" ci/report/check.py openmetrics "$tmp/fx.om"; then ok "strict OpenMetrics parser accepts it"; else bad "OpenMetrics parser"; fi
expect 0 "export --per-measurement" "$FP" export --db "$tmp/fx.db" --format openmetrics --per-measurement -o "$tmp/full.om"
has "$tmp/full.om" 'cell="bw-host-16384-r0"' "per-measurement series carry the cell"
head -n -1 "$tmp/fx.om" >"$tmp/noeof.om"
if "$PY" ci/report/check.py openmetrics "$tmp/noeof.om" 2>/dev/null; then bad "negative control: a truncated exposition passed"; else ok "negative control: a truncated exposition is rejected"; fi
if "$PY" ci/report/check.py dashboard dashboards/fabperf.json "$tmp/fx.om"; then ok "dashboard queries exported families"; else bad "dashboard"; fi
expect 2 "--push needs openmetrics" "$FP" export --db "$tmp/fx.db" --format csv --push http://127.0.0.1:9
expect 2 "--push https refused with the reason" "$FP" export --db "$tmp/fx.db" --format openmetrics --push https://127.0.0.1:9
for code in 200 400; do
  rm -f "$tmp/port"
  "$PY" ci/report/check.py gateway "$tmp/port" "$tmp/push.txt" "$code" &
  GW_PID=$!
  for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
  want=0; [ "$code" = 400 ] && want=1
  expect "$want" "push to a gateway answering $code" "$FP" export --db "$tmp/fx.db" --format openmetrics --run 1 --push "http://127.0.0.1:$(cat "$tmp/port")"
  wait "$GW_PID" 2>/dev/null; GW_PID=
  if [ "$code" = 200 ]; then
    has "$tmp/push.txt.path" "/metrics/job/fabperf/run/1" "pushed to the run's group"
    has "$tmp/push.txt.path" "text/plain; version=0.0.4" "text format 0.0.4 content type"
    if "$PY" ci/report/check.py prometheus "$tmp/push.txt"; then ok "pushed body accepted by the text-format parser"; else bad "pushed body"; fi
  else
    has "$tmp/err" "answered 400" "the gateway's refusal is reported"
  fi
done

echo
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" = 0 ]
