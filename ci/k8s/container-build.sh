#!/usr/bin/env bash
# Build the agent image from ./Containerfile with buildah and smoke-test it.
#
#   ci/k8s/container-build.sh              # local base images (no registry access needed)
#   FABPERF_BASES=registry ci/k8s/container-build.sh   # pull rust:1-bookworm / debian:bookworm-slim
#   FABPERF_SMOKE_ONLY=1 FABPERF_IMAGE=TAG ci/k8s/container-build.sh   # only test an existing image
#
# Without registry access (this project's CI), the two base images are made
# locally: Debian bookworm from the apt mirror with mmdebstrap, and a build base
# that adds this machine's Rust toolchain (`rustc --print sysroot`) to it. The
# host's CA bundle is copied into both so cargo and apt work behind a
# TLS-intercepting proxy. Needs root, buildah, mmdebstrap; ~20 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/../.."

TAG="${FABPERF_IMAGE:-localhost/fabperf:ci}"
ISO=(--isolation chroot)   # no user namespaces / nested OCI runtime needed
args=()

if [ "${FABPERF_BASES:-local}" != registry ] && [ "${FABPERF_SMOKE_ONLY:-0}" != 1 ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  if ! buildah inspect localhost/fabperf-base:bookworm >/dev/null 2>&1; then
    echo "==> base: Debian bookworm (mmdebstrap)"
    mirror="$({ grep -hE '^[[:space:]]*(deb|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } | grep -oE 'https?://[^[:space:]]+/debian' | head -n1)"
    mmdebstrap --variant=minbase bookworm "$work/rootfs.tar" ${mirror:+"$mirror"} >/dev/null
    c="$(buildah from scratch)"
    m="$(buildah mount "$c")"
    tar -C "$m" -xf "$work/rootfs.tar"
    cp /etc/ssl/certs/ca-certificates.crt "$m/etc/ssl/certs/ca-certificates.crt" 2>/dev/null || {
      mkdir -p "$m/etc/ssl/certs"; cp /etc/ssl/certs/ca-certificates.crt "$m/etc/ssl/certs/"; }
    buildah umount "$c" >/dev/null
    buildah commit -q "$c" localhost/fabperf-base:bookworm >/dev/null
    buildah rm "$c" >/dev/null
  fi
  sysroot="$(rustc --print sysroot)"
  echo "==> build base: bookworm + gcc + Rust from $sysroot"
  c="$(buildah from localhost/fabperf-base:bookworm)"
  buildah run "${ISO[@]}" --network host "$c" -- sh -c \
    'apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null && rm -rf /var/lib/apt/lists/*'
  m="$(buildah mount "$c")"
  mkdir -p "$m/usr/local/rust" "$m/usr/local/cargo"
  cp -a "$sysroot/." "$m/usr/local/rust/"
  buildah umount "$c" >/dev/null
  buildah config --env CARGO_HOME=/usr/local/cargo --env CARGO_HTTP_CAINFO=/etc/ssl/certs/ca-certificates.crt \
    --env PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  buildah commit -q "$c" localhost/fabperf-rust:bookworm >/dev/null
  buildah rm "$c" >/dev/null
  args=(--build-arg RUST_IMAGE=localhost/fabperf-rust:bookworm --build-arg RUNTIME_IMAGE=localhost/fabperf-base:bookworm)
fi

if [ "${FABPERF_SMOKE_ONLY:-0}" = 1 ]; then
  echo "==> smoke test only (FABPERF_SMOKE_ONLY=1): $TAG"
else
  echo "==> buildah build -t $TAG"
  buildah build "${ISO[@]}" --network host "${args[@]}" -t "$TAG" -f Containerfile .
fi

echo "==> smoke test"
c="$(buildah from "$TAG")"
trap 'buildah rm "$c" >/dev/null 2>&1 || true; rm -rf "${work:-/nonexistent}"' EXIT
buildah run "${ISO[@]}" "$c" -- fabperf --version
buildah run "${ISO[@]}" "$c" -- sh -c 'test -e /usr/lib/x86_64-linux-gnu/libibverbs.so.1 && ls /usr/lib/x86_64-linux-gnu/libibverbs/ | grep -q rxe && echo "libibverbs1 + providers (rxe, mlx5, ...) present"'
[ "$(buildah inspect --format '{{.OCIv1.Config.User}}' "$TAG")" = "65532:65532" ] || { echo "FAIL: image must default to uid 65532"; exit 1; }
log="$(mktemp)"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
buildah run "${ISO[@]}" --network host "$c" -- sh -c \
  "printf 'container-smoke-test-token' > /tmp/token && exec timeout 20 fabperf server --bind 127.0.0.1 --port $port --token-file /tmp/token" \
  >"$log" 2>&1 &
srv=$!
ok=0
for _ in $(seq 1 60); do
  kill -0 "$srv" 2>/dev/null || break   # the agent exited: fail below with its log
  if grep -q "listening on 127.0.0.1:$port" "$log" && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    ok=1
    break
  fi
  sleep 0.25
done
cat "$log"
wait "$srv" 2>/dev/null || true
rm -f "$log"
[ "$ok" = 1 ] || { echo "FAIL: the agent in the image did not start listening on 127.0.0.1:$port"; exit 1; }
echo "container-build: $TAG built; agent answers on its control port (what the readiness probe checks)"
