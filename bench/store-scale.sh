#!/usr/bin/env bash
# The store and the report at scale: generate the synthetic results store of
# an N-node bidirectional tcp-lat mesh (every ordered pair, each size, each
# repeat, histograms included, a few slow nodes and links and their re-tests:
# crates/fabperf-report/examples/mesh_store.rs), then time `mesh-summary`,
# `report` (table and HTML) and `export --format openmetrics` on it, with the
# peak RSS of each (GNU time). Prints one Markdown table for BENCHMARKS.md.
#
#   bench/store-scale.sh                      # 1024 nodes, sizes 64,4096, 3 repeats (~26 GiB)
#   bench/store-scale.sh --nodes 1024 --sizes 64 --repeats 1   # 1,047,552 cells, 4.4 GiB
#   bench/store-scale.sh --nodes 256 --dir /tmp/fp-scale
#
# Options: --nodes N (default 1024), --sizes LIST (64,4096), --repeats R (3),
# --dir DIR (where the store and the outputs go; default /var/tmp/fabperf-store-scale),
# --keep-db (reuse DIR's store when it was made with the same N, sizes and repeats).
# Needs /usr/bin/time (GNU time) and about 0.45 GiB of disk per 100k cells; delete DIR after.
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=1024 SIZES=64,4096 REPEATS=3 DIR=/var/tmp/fabperf-store-scale KEEP=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --nodes) NODES=${2:?}; shift 2 ;;
        --sizes) SIZES=${2:?}; shift 2 ;;
        --repeats) REPEATS=${2:?}; shift 2 ;;
        --dir) DIR=${2:?}; shift 2 ;;
        --keep-db) KEEP=1; shift ;;
        -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "store-scale: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
[[ $NODES =~ ^[0-9]+$ && $REPEATS =~ ^[0-9]+$ && $SIZES =~ ^[0-9]+(,[0-9]+)*$ ]] || {
    echo "store-scale: --nodes and --repeats want numbers, --sizes a comma-separated list of numbers" >&2
    exit 2
}
[[ -x /usr/bin/time ]] || { echo "store-scale: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }

cargo build --release -q -p fabperf
cargo build --release -q -p fabperf-report --example mesh_store
BIN=target/release/fabperf
mkdir -p "$DIR"
DB=$DIR/mesh-$NODES-$SIZES-$REPEATS.db
ROWS=()

# timed NAME CMD...: run CMD under GNU time, keep its wall time and peak RSS.
timed() {
    local name=$1 tf wall rss
    shift
    tf=$(mktemp)
    if ! /usr/bin/time -f '%e %M' -o "$tf" "$@"; then
        echo "store-scale: $name failed: $*" >&2
        rm -f "$tf"
        exit 1
    fi
    read -r wall rss < <(tail -n 1 "$tf")
    rm -f "$tf"
    ROWS+=("| $name | $wall s | $((rss / 1024)) MiB |")
    printf 'store-scale: %-44s %8s s %6s MiB\n' "$name" "$wall" "$((rss / 1024))" >&2
}

if [[ $KEEP == 1 && -s $DB ]]; then
    echo "store-scale: reusing $DB" >&2
else
    rm -f "$DB" "$DB-wal" "$DB-shm"
    timed "generate the store (mesh_store)" target/release/examples/mesh_store \
        --db "$DB" --nodes "$NODES" --sizes "$SIZES" --repeats "$REPEATS"
fi
timed "fabperf mesh-summary" sh -c '"$1" mesh-summary --db "$2" >"$3"' sh "$BIN" "$DB" "$DIR/summary.txt"
timed "fabperf mesh-summary --json" sh -c '"$1" mesh-summary --db "$2" --json >"$3"' sh "$BIN" "$DB" "$DIR/summary.json"
timed "fabperf report (table)" "$BIN" report --db "$DB" -o "$DIR/report.txt"
timed "fabperf report --html" "$BIN" report --db "$DB" --html "$DIR/report.html" -o /dev/null
timed "fabperf export --format openmetrics" "$BIN" export --db "$DB" --format openmetrics -o "$DIR/metrics.om"

cells=$(sqlite3 "$DB" 'select count(*) from cells' 2>/dev/null || echo '?')
printf '\n%s nodes, sizes %s, %s repeats: %s cells, store %s MiB (%s)\n\n' "$NODES" "$SIZES" "$REPEATS" \
    "$cells" "$(($(stat -c %s "$DB") / 1048576))" "$DB"
echo "| step | wall | peak RSS |"
echo "|---|---|---|"
printf '%s\n' "${ROWS[@]}"
ls -l "$DIR"/summary.txt "$DIR"/report.txt "$DIR"/report.html "$DIR"/metrics.om | awk '{print "output: " $NF ": " int($5 / 1024) " KiB"}'
