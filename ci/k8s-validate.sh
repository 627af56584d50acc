#!/usr/bin/env bash
# Validate every Kubernetes object fabperf ships (manifests/, device-plugin-config/)
# and renders fresh (every examples/*.toml plan, `fabperf k8s device-plugin-config`)
# against the upstream Kubernetes schemas (PyPI kubernetes-validate, pinned), the
# NetworkAttachmentDefinition and NicClusterPolicy CRD schemas in ci/k8s/schemas/,
# the embedded CNI / device plugin JSON, and the API server's Job/CronJob rules (the
# in-cluster runner under manifests/run/). Then prove the validator rejects the
# broken objects in ci/k8s/broken/. Exits non-zero on any invalid object.
#
# Needs: python3 with venv (Debian: python3-venv), PyPI access on first run, cargo.
# Env: FABPERF_BIN=path to a built fabperf (default: cargo run -p fabperf).
set -euo pipefail
cd "$(dirname "$0")/.."

KV_VERSION=1.37.0   # kubernetes-validate release = Kubernetes 1.37 schemas (k8s-openapi feature v1_37)
VENV="${FABPERF_K8S_VENV:-${XDG_CACHE_HOME:-${HOME:-/tmp}/.cache}/fabperf/k8s-validate-$KV_VERSION}"

if ! "$VENV/bin/python" -c "import kubernetes_validate.version as v, sys; sys.exit(v.__version__ != '$KV_VERSION')" 2>/dev/null; then
  echo "installing kubernetes-validate==$KV_VERSION into $VENV"
  rm -rf "$VENV"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "kubernetes-validate==$KV_VERSION"
fi
PY="$VENV/bin/python"

if [ -n "${FABPERF_BIN:-}" ]; then
  fabperf() { "$FABPERF_BIN" "$@"; }
else
  cargo build --quiet --locked -p fabperf
  fabperf() { "${CARGO_TARGET_DIR:-target}/debug/fabperf" "$@"; }
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

echo "==> committed manifests"
"$PY" ci/k8s/validate.py manifests device-plugin-config

echo "==> fresh renders of every example plan"
for plan in examples/*.toml; do
  out="$tmp/$(basename "$plan" .toml)"
  fabperf k8s render --plan "$plan" --out "$out" --device-plugin-out "$out/device-plugin" 2>/dev/null
  "$PY" ci/k8s/validate.py --quiet "$out"
done

echo "==> fabperf k8s device-plugin-config from the example detect files"
detects=()
for d in examples/*.detect.json; do detects+=(--detect "$d"); done
mkdir -p "$tmp/dp"
fabperf k8s device-plugin-config "${detects[@]}" --format json > "$tmp/dp/config.json"
fabperf k8s device-plugin-config "${detects[@]}" --format configmap > "$tmp/dp/configmap.yaml"
fabperf k8s device-plugin-config "${detects[@]}" --format nic-cluster-policy > "$tmp/dp/ncp.yaml"
"$PY" ci/k8s/validate.py "$tmp/dp"

echo "==> fabperf k8s policy-scale (what a runner's policy command applies)"
mkdir -p "$tmp/ps"
fabperf k8s policy-scale --plan examples/pod-policy-scale.toml --count 3 > "$tmp/ps/policies.yaml"
"$PY" ci/k8s/validate.py "$tmp/ps"

echo "==> the validator rejects broken objects"
for f in ci/k8s/broken/*.yaml; do
  expect="$(sed -n 's/^# expect: //p' "$f")"
  if out="$("$PY" ci/k8s/validate.py --quiet "$f")"; then
    echo "FAIL: $f was accepted"; exit 1
  fi
  if [ -z "$expect" ] || ! grep -qF -- "$expect" <<<"$out"; then
    echo "FAIL: $f was rejected, but not for the expected reason ($expect):"; echo "$out"; exit 1
  fi
  echo "rejected as expected: $f"
done
echo "k8s-validate: all objects valid, all broken objects rejected"
