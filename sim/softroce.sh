#!/usr/bin/env bash
# Soft-RoCE (rdma_rxe) testbed: boots a Debian kernel in QEMU with a small
# initramfs rootfs, brings up rxe and runs fabperf's RDMA tests and a
# fabperf-vs-perftest comparison, or any command you give it.
#
#   sim/softroce.sh                 build, boot, run RDMA test binaries + comparison
#   sim/softroce.sh -- CMD ARGS...  run CMD inside the guest (rxe up, fabperf on PATH)
#   sim/softroce.sh --help
#
# See docs/softroce.md. Nothing is installed on the host: kernel packages are
# fetched with a private APT configuration into the cache and unpacked there.
set -euo pipefail

SIM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
REPO=$(cd "$SIM_DIR/.." && pwd -P)
# CI may run without HOME: fall back to the user's home from the passwd database.
USER_HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
CACHE=${FABPERF_SIM_CACHE:-${USER_HOME:-/root}/.cache/fabperf-sim}
TARGET_DIR=$(realpath -m "${CARGO_TARGET_DIR:-$REPO/target}") # relative: to the cwd, as cargo does
# The Debian mirrors this host's apt already uses (main archive and security).
host_apt_uris() {
  { grep -hE '^[[:space:]]*(deb|URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
      /etc/apt/sources.list.d/*.sources 2>/dev/null || true; } \
    | grep -oE 'https?://[^[:space:]]+' | sed 's:/*$::'
}
host_mirror() {
  host_apt_uris | grep -vE -- '-security$' | grep -E '/debian$' | head -n1
}
host_security_mirror() {
  host_apt_uris | grep -E '/debian-security$' | head -n1
}
MIRROR=${FABPERF_SIM_MIRROR:-$(host_mirror)}
SECURITY_MIRROR=${FABPERF_SIM_SECURITY_MIRROR:-$(host_security_mirror)}
if [ -z "$MIRROR" ]; then
  echo "softroce: no Debian mirror found in this host's apt sources; set FABPERF_SIM_MIRROR=<URL of a Debian archive>" >&2
  exit 2
fi
if [ -z "$SECURITY_MIRROR" ]; then SECURITY_MIRROR="${MIRROR%/debian}/debian-security"; fi
KERNEL_CHOICE=${FABPERF_SIM_KERNEL:-auto}   # auto | backports | bookworm
VM_MEM=${FABPERF_SIM_MEM:-2048}
VM_SMP=${FABPERF_SIM_SMP:-2}
NET_MTU=${FABPERF_SIM_MTU:-9000}
# Bump when the rootfs recipe or the module list changes (invalidates caches).
ROOTFS_RECIPE=4
MODULES_RECIPE=3
ROOTFS_PACKAGES=rdma-core,ibverbs-providers,ibverbs-utils,perftest,iproute2,kmod,rdmacm-utils,procps,util-linux,jq,wireguard-tools,iputils-ping
GUEST_MODULES="virtio_pci virtio_net 9pnet_virtio 9p veth dummy crc32_generic crc32-cryptoapi crc32-pclmul
 rdma_rxe ib_uverbs ib_uverbs_support rdma_ucm ib_umad
 bridge wireguard xfrm_user esp4 xfrm4_tunnel tunnel4 gcm ghash-generic ghash-clmulni-intel aes_generic aesni_intel
 seqiv echainiv authenc geniv cryptd crypto_simd sch_netem"

log() { printf 'softroce: %s\n' "$*" >&2; }
die() { printf 'softroce: error: %s\n' "$*" >&2; exit 2; }
now() { date +%s; }

usage() {
    cat <<'EOF'
Usage: sim/softroce.sh [-- CMD ARGS...]

Without arguments: builds fabperf (release) and the fabperf-rdma test binaries,
boots a soft-RoCE (rdma_rxe) QEMU guest, runs the test binaries there, a plan
on the guest's two rails (sim/guest/rails.sh) and then fabperf next to perftest
on the same rxe link, prints the ratio table and writes it to
$CARGO_TARGET_DIR/softroce/compare.md. Exits non-zero on any failure.

With "-- CMD ARGS...": runs CMD inside the guest instead (cwd = your cwd when
it is inside the repo, else the repo root) and exits with its status. Inside:
  fabperf on PATH, perftest installed, the repo and the cargo target dir at the
  same paths as on the host, and exported:
  FABPERF_RDMA_DEVICE       client rxe device (rxe0, initial namespace)
  FABPERF_RDMA_PEER         address of the peer "node" (10.77.0.2 in ns1)
  FABPERF_RDMA_PEER_DEVICE  the peer's rxe device (rxe1)
  FABPERF_RDMA_RAIL1_DEVICE, FABPERF_RDMA_RAIL1_PEER, FABPERF_RDMA_RAIL1_PEER_DEVICE
                            rail 1, a second link between the nodes (rxe2 on veth2
                            10.77.1.1, rxe3 in ns1 at 10.77.1.2); empty in the single topology
  FABPERF_AGENT             host:port of a fabperf agent already serving in the peer
  FABPERF_SIM_TOPOLOGY      netns (two namespaces) or single (one rxe device)
  Run a server in the peer node with: sim/guest/peer.sh CMD ARGS...

Environment:
  FABPERF_SIM_CACHE    cache dir (default ~/.cache/fabperf-sim)
  FABPERF_BIN          use this fabperf binary instead of building one
  FABPERF_SIM_KERNEL   auto (default) | backports | bookworm
  FABPERF_SIM_TIMEOUT  seconds before the guest is killed (default 900; 1500 without --)
  FABPERF_SIM_ROUNDS   comparison rounds (default 6, alternating which tool goes first)
  FABPERF_SIM_REPEATS  runs of each tool per test and round, mirrored A B B A (default 2)
  FABPERF_SIM_MTU      veth MTU in the guest (default 9000 -> rxe active_mtu 4096)
  FABPERF_SIM_AGENT=0  do not start a fabperf agent in the peer node
  FABPERF_SIM_ENFORCE_TARGETS=1  fail when a ratio misses its target
  FABPERF_SIM_LAT_ITERS  latency iterations per comparison run (default 1000)
  FABPERF_SIM_BW_SECONDS measured seconds per bandwidth comparison run (default 4)
  FABPERF_SIM_COMPARE_ONLY=1  skip the test binaries, only compare with perftest
  FABPERF_SIM_RAILS_SKEW  most seconds between the rails' starts (rdma-bw) or first pings
                       (rdma-lat) in a round of the two-rail plans (default 1)
  FABPERF_SIM_CROSS_RAILS=0  skip the cross-rail plan (rails through a routing spine)
  FABPERF_SIM_EXTRA    a script (path as seen in the guest: the repo and target dir
                       keep their host paths) run once in the first guest after the
                       test binaries; the run fails if it fails
  FABPERF_SIM_FRESH_GUEST=0   all comparison rounds in one guest (default: a fresh
                       guest per round; both tools slow down as a guest ages)
  FABPERF_SIM_MEM / FABPERF_SIM_SMP / FABPERF_SIM_ACCEL (kvm|tcg)
  FABPERF_SIM_EXTRA_APPEND  extra guest kernel arguments (e.g. idle=poll)
  FABPERF_SIM_TSC_RELIABLE=0  let the guest kernel's clocksource watchdog run: under
                       TCG it marks the TSC unstable ~45 s after boot and switches to
                       hpet, where every clock read is a ~0.8 us trapped system call
                       (default: boot with tsc=reliable, as on real servers the TSC is)
EOF
}

MODE=selftest
CMD=()
if [[ $# -gt 0 ]]; then
    case $1 in
        -h|--help) usage; exit 0 ;;
        --) shift; [[ $# -gt 0 ]] || die "nothing to run after --"; MODE=cmd; CMD=("$@") ;;
        *) usage >&2; die "unknown argument '$1' (use -- before a command to run in the guest)" ;;
    esac
fi
if [[ $MODE == cmd ]]; then TIMEOUT=${FABPERF_SIM_TIMEOUT:-900}; else TIMEOUT=${FABPERF_SIM_TIMEOUT:-1500}; fi
[[ $TIMEOUT =~ ^[0-9]+$ ]] || die "FABPERF_SIM_TIMEOUT must be a number of seconds, got '$TIMEOUT'"

need_tools() {
    local missing=() t
    for t in qemu-system-x86_64 mmdebstrap cpio depmod modprobe apt-get dpkg-deb gzip xz timeout flock jq; do
        command -v "$t" >/dev/null 2>&1 || missing+=("$t")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        die "missing host tools: ${missing[*]}; install with: apt-get install -y qemu-system-x86 mmdebstrap kmod cpio xz-utils"
    fi
}

# ---------------------------------------------------------------- private apt
# apt_setup NAME "SOURCES LINES": a private APT configuration under
# $CACHE/apt/NAME that never touches the host's apt state.
apt_setup() {
    local name=$1 sources=$2 d=$CACHE/apt/$1
    mkdir -p "$d"/lists/partial "$d"/archives/partial "$d"/etc/apt.conf.d "$d"/etc/preferences.d "$d"/etc/sources.list.d
    printf '%s\n' "$sources" >"$d/etc/sources.list"
    cat >"$d/apt.conf" <<EOF
Dir::State "$d";
Dir::State::lists "$d/lists";
Dir::State::status "/dev/null";
Dir::Cache "$d";
Dir::Cache::archives "$d/archives";
Dir::Etc::SourceList "$d/etc/sources.list";
Dir::Etc::SourceParts "$d/etc/sources.list.d";
Dir::Etc::Preferences "$d/etc/preferences";
Dir::Etc::PreferencesParts "$d/etc/preferences.d";
Dir::Etc::Parts "$d/etc/apt.conf.d";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
APT::Sandbox::User "root";
Acquire::Retries "3";
Acquire::http::Timeout "30";
EOF
    # Refresh the package lists at most once every 12 hours.
    local stamp=$d/updated
    if [[ ! -e $stamp || -n $(find "$stamp" -mmin +720 2>/dev/null) ]]; then
        # apt-get update exits 0 even when it could not fetch: read its log too.
        if APT_CONFIG=$d/apt.conf apt-get -q update >"$d/update.log" 2>&1 &&
            ! grep -q -E '^(Err:|E:|W: Failed to fetch|W: Some index files failed)' "$d/update.log"; then
            touch "$stamp"
        else
            log "apt-get update for $name failed (see $d/update.log); using cached lists if any"
            return 1
        fi
    fi
}
apt_run() { local name=$1; shift; APT_CONFIG=$CACHE/apt/$name/apt.conf "$@"; }

# kernel_abi_for NAME SUITE: the kernel ABI (e.g. 7.3.4+deb13-amd64) that
# linux-image-amd64 in SUITE depends on.
kernel_abi_for() {
    apt_run "$1" apt-cache show "linux-image-amd64/$2" 2>/dev/null |
        sed -n 's/^Depends: //p' | tr ',' '\n' |
        sed -n 's/^ *linux-image-\([0-9][^ ]*-amd64\).*/\1/p' | sort -V | tail -n1
}

# fetch_kernel NAME ABI: download the packages of kernel ABI into
# $CACHE/kernels/ABI/debs and unpack them into $CACHE/kernels/ABI/root.
fetch_kernel() {
    local name=$1 abi=$2 kd=$CACHE/kernels/$2 pkgs=() p
    [[ -e $kd/unpacked ]] && return 0
    mkdir -p "$kd/debs" && rm -rf "$kd/root" && mkdir -p "$kd/root"
    # Newer packaging splits the kernel into binary/modules/base packages and
    # leaves linux-image-ABI an empty meta package; older has it all in one.
    if apt_run "$name" apt-cache show "linux-binary-$abi" >/dev/null 2>&1; then
        pkgs=("linux-binary-$abi" "linux-modules-$abi")
        apt_run "$name" apt-cache show "linux-base-$abi" >/dev/null 2>&1 && pkgs+=("linux-base-$abi")
    else
        pkgs=("linux-image-$abi")
    fi
    # The .debs are kept: older backports kernels leave the mirror.
    if [[ ! -e $kd/debs/complete ]]; then
        log "downloading ${pkgs[*]}"
        rm -f "$kd"/debs/*.deb
        (cd "$kd/debs" && apt_run "$name" apt-get -q download "${pkgs[@]}" >"$kd/download.log" 2>&1) ||
            { log "download of kernel $abi failed (see $kd/download.log)"; return 1; }
        touch "$kd/debs/complete"
    fi
    for p in "$kd"/debs/*.deb; do dpkg-deb -x "$p" "$kd/root"; done
    # Debian ships modules under /usr/lib/modules (trixie) or /lib/modules (bookworm).
    if [[ -d $kd/root/usr/lib/modules/$abi && ! -e $kd/root/lib/modules/$abi ]]; then
        mkdir -p "$kd/root/lib/modules" && ln -s "../../usr/lib/modules/$abi" "$kd/root/lib/modules/$abi"
    fi
    local img
    for img in "$kd/root/boot/vmlinuz-$abi" "$kd/root/usr/lib/modules/$abi/vmlinuz"; do
        [[ -f $img ]] && { ln -sf "${img#"$kd"/}" "$kd/vmlinuz"; break; }
    done
    [[ -e $kd/vmlinuz ]] || { log "kernel $abi: no vmlinuz in its packages"; return 1; }
    depmod -b "$kd/root" "$abi"
    # Two rxe devices in separate network namespaces need rdma_rxe's
    # per-namespace UDP sockets (kernel 7.2+): look for its symbols.
    local ko
    ko=$(find "$kd/root/lib/modules/$abi/" -name 'rdma_rxe.ko*' | head -n1)
    [[ -n $ko ]] || { log "kernel $abi has no rdma_rxe module"; return 1; }
    local hits
    hits=$(module_text "$ko" | grep -a -c -e rxe_ns_pernet_sk4 -e rxe_namespace_init || true)
    if [[ ${hits:-0} -gt 0 ]]; then
        echo netns >"$kd/topology"
    else
        echo single >"$kd/topology"
    fi
    touch "$kd/unpacked"
}

module_text() {
    case $1 in
        *.xz) xz -dc "$1" ;;
        *.zst) zstd -dc "$1" ;;
        *.gz) gzip -dc "$1" ;;
        *) cat "$1" ;;
    esac
}

# Kernel ABIs in the cache, newest first.
cached_kernels() {
    find "$CACHE/kernels" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' 2>/dev/null | sort -Vr
}

# choose_kernel: sets KABI, KDIR and TOPOLOGY.
choose_kernel() {
    local abi=
    if [[ $KERNEL_CHOICE != bookworm ]]; then
        if apt_setup trixie "deb $MIRROR trixie main
deb $MIRROR trixie-backports main
deb $SECURITY_MIRROR trixie-security main"; then :; fi
        abi=$(kernel_abi_for trixie trixie-backports || true)
        if [[ -n $abi ]]; then
            if fetch_kernel trixie "$abi" && [[ $(cat "$CACHE/kernels/$abi/topology") == netns ]]; then
                log "kernel $abi (trixie-backports) has per-namespace rxe sockets"
            else
                [[ -e $CACHE/kernels/$abi/topology ]] &&
                    log "kernel $abi (trixie-backports) lacks per-namespace rxe sockets (rxe_ns_pernet_sk4)"
                abi=
            fi
        else
            log "no kernel found in trixie-backports"
        fi
        if [[ -z $abi ]]; then
            # A cached copy of an earlier kernel that had the feature.
            local k
            for k in $(cached_kernels); do
                if [[ -e $CACHE/kernels/$k/unpacked && $(cat "$CACHE/kernels/$k/topology") == netns ]]; then
                    abi=$k; log "using cached kernel $abi"; break
                fi
            done
        fi
        if [[ -z $abi && $KERNEL_CHOICE == backports ]]; then
            die "no kernel with per-namespace rdma_rxe sockets could be had (FABPERF_SIM_KERNEL=backports)"
        fi
    fi
    if [[ -z $abi ]]; then
        log "falling back to bookworm's kernel: single rxe device topology"
        apt_setup bookworm "deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb $SECURITY_MIRROR bookworm-security main" || true
        abi=$(kernel_abi_for bookworm bookworm-security || true)
        [[ -n $abi ]] || abi=$(kernel_abi_for bookworm bookworm || true)
        if [[ -z $abi ]] || ! fetch_kernel bookworm "$abi"; then
            local k
            for k in $(cached_kernels); do
                [[ -e $CACHE/kernels/$k/unpacked ]] && { abi=$k; break; }
            done
            [[ -e $CACHE/kernels/$abi/unpacked ]] ||
                die "could not fetch any Debian kernel (network? see $CACHE/apt/*/update.log)"
            log "using cached kernel $abi"
        fi
    fi
    KABI=$abi
    KDIR=$CACHE/kernels/$abi
    TOPOLOGY=$(cat "$KDIR/topology")
    [[ $KERNEL_CHOICE == bookworm ]] && TOPOLOGY=single
    return 0
}

# modules_cpio: the guest's kernel modules (with dependencies) as a gzip cpio
# placed under usr/lib/modules (in the rootfs /lib is a symlink to usr/lib).
modules_cpio() {
    # Keyed by the module list too: branches that add modules do not share a stale set.
    local key out
    key=$(printf '%s|%s' "$MODULES_RECIPE" "$GUEST_MODULES" | sha256sum | cut -c1-12)
    out=$KDIR/modules-r$MODULES_RECIPE-$key.cpio.gz
    [[ -s $out ]] && { MODULES_CPIO=$out; return 0; }
    local st=$KDIR/modstage m line f rel
    rm -rf "$st" && mkdir -p "$st/usr/lib/modules/$KABI" && ln -s usr/lib "$st/lib"
    for m in $GUEST_MODULES; do
        modprobe -d "$KDIR/root" -S "$KABI" --show-depends "$m" 2>/dev/null || true
    done | while read -r line; do
        case $line in
            insmod\ *)
                f=${line#insmod }; f=${f%% *}
                rel=${f#*/lib/modules/"$KABI"/}
                mkdir -p "$st/usr/lib/modules/$KABI/$(dirname "$rel")"
                cp -L "$f" "$st/usr/lib/modules/$KABI/$rel" ;;
        esac
    done
    for f in modules.builtin modules.builtin.modinfo modules.order; do
        [[ -e $KDIR/root/lib/modules/$KABI/$f ]] && cp -L "$KDIR/root/lib/modules/$KABI/$f" "$st/usr/lib/modules/$KABI/"
    done
    depmod -b "$st" "$KABI"
    [[ -n $(find "$st" -name 'rdma_rxe.ko*') ]] || die "rdma_rxe did not make it into the module set of $KABI"
    (cd "$st" && find usr | cpio -o -H newc -R 0:0 --quiet | gzip -6 >"$out.tmp") && mv "$out.tmp" "$out"
    rm -rf "$st"
    MODULES_CPIO=$out
}

# rootfs_cpio: Debian bookworm minbase + RDMA userspace as a gzip cpio.
rootfs_cpio() {
    local key out root
    key=$(printf '%s|%s|%s' "$ROOTFS_RECIPE" "$ROOTFS_PACKAGES" "$MIRROR" | sha256sum | cut -c1-12)
    out=$CACHE/rootfs/bookworm-$key.cpio.gz
    if [[ -s $out ]]; then ROOTFS_CPIO=$out; return 0; fi
    mkdir -p "$CACHE/rootfs"
    root=$CACHE/rootfs/build-$key
    rm -rf "$root"
    log "building the guest rootfs with mmdebstrap (bookworm: $ROOTFS_PACKAGES)"
    mmdebstrap --quiet --mode=root --variant=minbase --include="$ROOTFS_PACKAGES" \
        --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
        bookworm "$root" "$MIRROR" >"$CACHE/rootfs/mmdebstrap.log" 2>&1 ||
        die "mmdebstrap failed; see $CACHE/rootfs/mmdebstrap.log"
    rm -rf "$root"/var/cache/apt/* "$root"/var/lib/apt/lists/* "$root"/usr/lib/udev/hwdb.bin \
        "$root"/usr/lib/udev/hwdb.d "$root"/usr/share/zoneinfo/right "$root"/usr/share/zoneinfo/posix
    rm -f "$root/init"
    (cd "$root" && find . -mindepth 1 | sed 's,^\./,,' | cpio -o -H newc --quiet | gzip -6 >"$out.tmp") && mv "$out.tmp" "$out"
    rm -rf "$root"
    ROOTFS_CPIO=$out
}

# ---------------------------------------------------------------- host builds
build_host() {
    if [[ -n ${FABPERF_BIN:-} ]]; then
        [[ -x $FABPERF_BIN ]] || die "FABPERF_BIN=$FABPERF_BIN is not an executable file"
        FABPERF=$(readlink -f "$FABPERF_BIN")
    else
        log "cargo build --release -p fabperf (target dir $TARGET_DIR)"
        (cd "$REPO" && CARGO_TARGET_DIR=$TARGET_DIR cargo build --release -p fabperf) ||
            die "cargo build --release -p fabperf failed"
        FABPERF=$TARGET_DIR/release/fabperf
    fi
    TEST_BINS=()
    if [[ $MODE == selftest ]]; then
        log "cargo test -p fabperf-rdma --release --no-run"
        local json
        json=$(cd "$REPO" && CARGO_TARGET_DIR=$TARGET_DIR cargo test -p fabperf-rdma --release --no-run \
            --message-format=json) || die "building the fabperf-rdma test binaries failed"
        mapfile -t TEST_BINS < <(jq -r 'select(.reason == "compiler-artifact" and .profile.test == true
            and .executable != null) | .executable' <<<"$json")
        [[ ${#TEST_BINS[@]} -gt 0 ]] || die "cargo produced no fabperf-rdma test binaries"
    fi
}

# ---------------------------------------------------------------- the guest
pick_accel() {
    ACCEL=${FABPERF_SIM_ACCEL:-}
    if [[ -z $ACCEL ]]; then
        # kvm_pvm (Pagetable-based VM) cannot run a stock kernel: use TCG there.
        if [[ -w /dev/kvm && ! -e /sys/module/kvm_pvm ]]; then ACCEL=kvm; else ACCEL=tcg; fi
    fi
}

boot_guest() {
    local run=$1 qemu_rc=0
    local init_cpio=$run/init.cpio.gz
    # The per-run part of the initrd: /init only (cheap, so edits to it apply at once).
    local st=$run/initstage
    mkdir -p "$st" && cp "$SIM_DIR/guest/init" "$st/init" && chmod 755 "$st/init"
    (cd "$st" && echo init | cpio -o -H newc -R 0:0 --quiet | gzip -1 >"$init_cpio")
    cat "$ROOTFS_CPIO" "$MODULES_CPIO" "$init_cpio" >"$run/initrd.gz"

    local shares=(-virtfs "local,path=$run,mount_tag=simrun,security_model=none,id=simrun"
        -virtfs "local,path=$REPO,mount_tag=repo,security_model=none,id=repo")
    if [[ $TARGET_DIR != "$REPO" && $TARGET_DIR != "$REPO"/* ]]; then
        mkdir -p "$TARGET_DIR"
        shares+=(-virtfs "local,path=$TARGET_DIR,mount_tag=target,security_model=none,id=target")
    fi
    local accel_args=(-accel "tcg,thread=multi" -cpu max)
    [[ $ACCEL == kvm ]] && accel_args=(-accel kvm -cpu host)
    # Under TCG the guest's clocksource watchdog sees the emulated TSC and
    # HPET drift apart and, ~45 s after boot, marks the TSC unstable: from
    # then on CLOCK_MONOTONIC is read from the emulated HPET, ~0.8 us per
    # read instead of ~60 ns, which slows every tool that times with the
    # system clock (fabperf) and not perftest (raw rdtsc), and in the middle
    # of a comparison round. Real servers keep the TSC, so by default the
    # guest does too.
    local append="console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init"
    [[ ${FABPERF_SIM_TSC_RELIABLE:-1} == 0 ]] || append+=" tsc=reliable"
    [[ -n ${FABPERF_SIM_EXTRA_APPEND:-} ]] && append+=" $FABPERF_SIM_EXTRA_APPEND"
    log "booting kernel $KABI ($ACCEL, $VM_SMP vCPU, ${VM_MEM} MiB, topology $TOPOLOGY, timeout ${TIMEOUT}s)"
    # stdin from /dev/null: no terminal raw mode, Ctrl-C kills QEMU.
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${accel_args[@]}" -smp "$VM_SMP" -m "$VM_MEM" \
        -nographic -no-reboot -nic none -kernel "$KDIR/vmlinuz" -initrd "$run/initrd.gz" \
        -append "$append" \
        "${shares[@]}" </dev/null 2>"$run/qemu.err" | console_filter || qemu_rc=${PIPESTATUS[0]}
    if [[ $qemu_rc == 124 || $qemu_rc == 137 ]]; then
        log "guest killed after ${TIMEOUT}s timeout (FABPERF_SIM_TIMEOUT)"
        return 124
    fi
    if [[ $qemu_rc != 0 ]]; then
        log "qemu exited with $qemu_rc: $(tail -n 5 "$run/qemu.err")"
    fi
    if [[ ! -s $run/status ]]; then
        log "the guest did not report a status (it crashed or powered off early; see output above)"
        return 125
    fi
    return "$(cat "$run/status")"
}

# The serial console minus firmware noise, terminal escapes, CRs and the
# power-off messages.
console_filter() {
    sed -u -e 's/\r$//' -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' \
        -e '/^SeaBIOS (version/d' -e '/^Booting from ROM\.\.\.$/d' \
        -e '/^\[ *[0-9.]*\] \(sysrq: Power Off\|reboot: Power down\)$/d'
}

write_env() {
    local f=$1 cwd=$REPO
    local here
    here=$(pwd -P)
    if [[ $here == "$REPO" || $here == "$REPO"/* || $here == "$TARGET_DIR" || $here == "$TARGET_DIR"/* ]]; then
        cwd=$here
    fi
    {
        printf 'export FABPERF_SIM_REPO=%q\n' "$REPO"
        printf 'export FABPERF_SIM_TARGET=%q\n' "$TARGET_DIR"
        printf 'export FABPERF_SIM_CWD=%q\n' "$cwd"
        printf 'export FABPERF_SIM_MODE=%q\n' "$MODE"
        printf 'export FABPERF_SIM_TOPOLOGY=%q\n' "$TOPOLOGY"
        printf 'export FABPERF_SIM_KABI=%q\n' "$KABI"
        printf 'export FABPERF_SIM_MTU=%q\n' "$NET_MTU"
        printf 'export FABPERF_SIM_ACCEL=%q\n' "$ACCEL"
        # The caller's fabperf/Rust settings follow into the guest.
        local v
        for v in $(compgen -e); do
            case $v in
                FABPERF_SIM_CACHE|FABPERF_BIN) ;;
                FABPERF_SIM_ROUNDS|FABPERF_SIM_REPEATS|FABPERF_SIM_ROUND_FIRST|FABPERF_SIM_AGENT|FABPERF_SIM_ENFORCE_TARGETS|FABPERF_SIM_LAT_ITERS|FABPERF_SIM_BW_SECONDS|FABPERF_SIM_COMPARE_ONLY|FABPERF_SIM_EXTRA|FABPERF_SIM_RAILS_SKEW|FABPERF_SIM_CROSS_RAILS) printf 'export %s=%q\n' "$v" "${!v}" ;;
                FABPERF_SIM_*) ;;
                FABPERF_*|RUST_LOG|RUST_BACKTRACE|RUST_TEST_THREADS) printf 'export %s=%q\n' "$v" "${!v}" ;;
            esac
        done
    } >"$f"
}

# boot_with_retry RUN_DIR: boot once; boot again (bounded) when the guest
# kernel died before reporting. Under TCG with several vCPUs the guest kernel
# can die while it patches its own code (static keys: an int3 oops in another
# vCPU, seen on 7.3.4); such a boot never reports a status (125). A test
# failure or a timeout is never retried.
boot_with_retry() {
    local run=$1 rc attempt=1 attempts=${FABPERF_SIM_BOOT_ATTEMPTS:-3}
    while :; do
        rc=0
        boot_guest "$run" || rc=$?
        [[ $rc == 125 && ! -s $run/status && $attempt -lt $attempts ]] || break
        attempt=$((attempt + 1))
        log "the guest kernel died before reporting (see the console above); booting again, attempt $attempt of $attempts"
        rm -rf "$run/out" "$run/status" && mkdir -p "$run/out"
    done
    return "$rc"
}

# fact FILE KEY: the value of KEY in a guest's facts.tsv (key<TAB>value lines).
fact() {
    awk -F'\t' -v k="$2" '$1 == k { print $2; found = 1; exit } END { if (!found) print "?" }' "$1"
}

# keep_results DIR TABLE: copy the ratio table, the per-run TSV and the raw
# logs into $TARGET_DIR/softroce.
keep_results() {
    local dir=$1 table=$2
    [[ -s $table ]] || return 0
    mkdir -p "$TARGET_DIR/softroce"
    cp "$table" "$TARGET_DIR/softroce/compare.md"
    [[ -s $dir/compare.tsv ]] && cp "$dir/compare.tsv" "$TARGET_DIR/softroce/compare.tsv"
    rm -rf "$TARGET_DIR/softroce/logs"
    [[ -d $dir/logs ]] && cp -r "$dir/logs" "$TARGET_DIR/softroce/logs"
    log "ratio table written to $TARGET_DIR/softroce/compare.md (raw runs: compare.tsv, logs/)"
}

main() {
    local t0 rc=0
    t0=$(now)
    need_tools
    mkdir -p "$CACHE"
    build_host
    local t1; t1=$(now)
    # The cache is shared by concurrent runs: lock it while preparing images only.
    exec 9>"$CACHE/.lock"
    flock -w 1800 9 || die "another softroce.sh has held $CACHE/.lock for 30 minutes"
    choose_kernel
    modules_cpio
    rootfs_cpio
    exec 9>&-
    pick_accel
    local t2; t2=$(now)
    log "host build $((t1 - t0))s, guest image $((t2 - t1))s (cache $CACHE)"

    RUN_DIR=
    mkdir -p "$CACHE/runs"
    # Leftovers of runs that were killed outright (a day old: no live run is that long).
    find "$CACHE/runs" -mindepth 1 -maxdepth 1 -type d -mmin +1440 -exec rm -rf {} + 2>/dev/null || true
    RUN_DIR=$(mktemp -d "$CACHE/runs/run.XXXXXX"); local run=$RUN_DIR
    trap 'rm -rf "$RUN_DIR"' EXIT
    chmod 755 "$run" && mkdir -p "$run/bin" "$run/out"
    # Without debug info (38 -> ~6 MB): the guest copies it into its RAM at
    # boot (sim/guest/main.sh), so no page of it is read over 9p mid-run.
    strip --strip-debug -o "$run/bin/fabperf" "$FABPERF" 2>/dev/null || cp "$FABPERF" "$run/bin/fabperf"
    if [[ $MODE == cmd ]]; then
        printf '%s\0' "${CMD[@]}" >"$run/argv"
    else
        printf '%s\n' "${TEST_BINS[@]}" >"$run/test-bins"
    fi
    if [[ $MODE == cmd || ${FABPERF_SIM_FRESH_GUEST:-1} == 0 ]]; then
        write_env "$run/env"
        boot_with_retry "$run" || rc=$?
        local t3; t3=$(now)
        [[ $MODE == selftest ]] && keep_results "$run/out" "$run/out/compare.md"
        log "guest ran $((t3 - t2))s; total $((t3 - t0))s; exit status $rc"
        return "$rc"
    fi
    # Self test: one fresh guest per comparison round. Both tools slow down
    # as a guest ages under their mixed workload (BENCHMARKS.md), so later
    # rounds in one boot compare worse-kept conditions; a fresh boot per
    # round gives every round the same start. The first boot also runs the
    # test binaries; which tool goes first alternates by round.
    local total=${FABPERF_SIM_ROUNDS:-6} r merged="$run/merged" brc
    [[ $total =~ ^[1-9][0-9]*$ ]] || die "FABPERF_SIM_ROUNDS must be a positive number"
    local mtu="?"
    mkdir -p "$merged/logs"
    printf 'round\ttest\ttool\tvalue\tunit\n' >"$merged/compare.tsv"
    local enforce=${FABPERF_SIM_ENFORCE_TARGETS:-0}
    for ((r = 1; r <= total; r++)); do
        rm -rf "$run/out" "$run/status" && mkdir -p "$run/out"
        export FABPERF_SIM_ROUNDS=1 FABPERF_SIM_ROUND_FIRST=$r FABPERF_SIM_ENFORCE_TARGETS=0
        if ((r > 1)); then export FABPERF_SIM_COMPARE_ONLY=1; fi
        write_env "$run/env"
        log "comparison round $r of $total in a fresh guest${FABPERF_SIM_COMPARE_ONLY:+ (comparison only)}"
        brc=0
        boot_with_retry "$run" || brc=$?
        [[ -s $run/out/compare.tsv ]] && tail -n +2 "$run/out/compare.tsv" >>"$merged/compare.tsv"
        [[ -d $run/out/logs ]] && cp -r "$run/out/logs" "$merged/logs/round$r"
        if [[ -s $run/out/facts.tsv ]]; then
            [[ $r == 1 ]] && mtu=$(fact "$run/out/facts.tsv" active_mtu)
            fact "$run/out/facts.tsv" clocksource >>"$merged/clocksources"
        fi
        if [[ $brc != 0 ]]; then
            rc=$brc
            log "round $r failed (exit $brc); no further rounds"
            break
        fi
    done
    local clocks="?"
    [[ -s $merged/clocksources ]] && clocks=$(sort -u "$merged/clocksources" | paste -sd/)
    KERNEL=$KABI TOPOLOGY=$TOPOLOGY MTU=$mtu ACCEL=$ACCEL CLOCKSOURCE=$clocks \
        ROUNDS_NOTE=", each round in a freshly booted guest" \
        "$REPO/sim/compare-table.sh" "$merged/compare.tsv" >"$merged/compare.md" || rc=1
    printf '\n=== ratio table over %d fresh guests\n' "$total"
    cat "$merged/compare.md"
    if grep -q 'MISSED\|FAILED' "$merged/compare.md"; then
        if [[ $enforce == 1 ]]; then
            log "a ratio missed its target (FABPERF_SIM_ENFORCE_TARGETS=1)"
            [[ $rc == 0 ]] && rc=1
        else
            echo "note: a ratio missed its target (reported only; FABPERF_SIM_ENFORCE_TARGETS=1 makes it fail)"
        fi
    fi
    keep_results "$merged" "$merged/compare.md"
    local t3; t3=$(now)
    log "guest ran $((t3 - t2))s; total $((t3 - t0))s; exit status $rc"
    return "$rc"
}

main
