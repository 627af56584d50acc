#!/usr/bin/env bash
# Checks that the workspace's `rust-version` (Cargo.toml) is true for the
# locked dependencies: none of them may need a newer Rust than it states.
# (Our own code's use of std is checked against it by clippy's
# incompatible_msrv lint, which reads the same field.)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
cargo metadata --locked --format-version 1 | python3 -c '
import json, sys
m = json.load(sys.stdin)
def ver(s):
    return tuple(int(x) for x in (s.split(".") + ["0", "0"])[:3])
ws = {p["id"] for p in m["packages"] if p["id"] in m["workspace_members"]}
claimed = {p["rust_version"] for p in m["packages"] if p["id"] in ws}
if len(claimed) != 1 or None in claimed:
    sys.exit(f"rust-version: every workspace crate must inherit the workspace rust-version, found {sorted(map(str, claimed))}")
ours = claimed.pop()
need = [(p["rust_version"], p["name"], p["version"]) for p in m["packages"]
        if p["id"] not in ws and p.get("rust_version")]
need.sort(key=lambda t: ver(t[0]), reverse=True)
top = need[0]
if ver(top[0]) > ver(ours):
    over = [f"{n} {v} needs {r}" for r, n, v in need if ver(r) > ver(ours)]
    sys.exit(f"rust-version {ours} in Cargo.toml is false: " + "; ".join(over) +
             f". Raise it to {top[0]}.")
print(f"rust-version {ours}: the locked dependencies need at most {top[0]} ({top[1]} {top[2]})")
'
