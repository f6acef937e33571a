# shellcheck shell=bash
# Common helpers for the ntprof-perf VM rig (sourced by build-kernel.sh,
# build-initramfs.sh and run.sh). Not meant to be run directly.

VM_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$VM_DIR/../.." && pwd)
CACHE=${NTPROF_VM_CACHE:-/var/cache/ntprof-perf-vm}
KSRC_TARBALL=${NTPROF_VM_KSRC:-/usr/src/linux-source-6.1.tar.xz}
JOBS=${NTPROF_VM_JOBS:-2}

log() { printf '[vm %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { printf '[vm] ERROR: %s\n' "$*" >&2; exit 1; }

# ensure_pkgs PKG...: apt-get install only the Debian packages that are missing.
ensure_pkgs() {
    local missing=() p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    log "installing missing packages: ${missing[*]}"
    [ "$(id -u)" -eq 0 ] || die "need root to apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # apt's progress goes to stderr: the scripts' stdout is their answer (build-kernel.sh
    # prints the kernel's directory, which the tests read), and on a machine without the
    # 6.12 sources apt's lines became part of that path.
    { apt-get install -y --no-install-recommends "${missing[@]}" \
        || { apt-get update && apt-get install -y --no-install-recommends "${missing[@]}"; }; } >&2 \
        || die "apt-get install ${missing[*]} failed"
}

# Debian package owning the kernel source tarball, and its version.
ksrc_pkg() { dpkg-query -S "$KSRC_TARBALL" 2>/dev/null | head -n1 | cut -d: -f1; }
ksrc_version() {
    local pkg; pkg=$(ksrc_pkg)
    if [ -n "$pkg" ]; then
        dpkg-query -W -f='${Package}=${Version}' "$pkg"
    else   # tarball not from a package: key on its size+mtime
        stat -c 'file=%n:%s:%Y' "$KSRC_TARBALL"
    fi
}

# with_lock NAME CMD...: serialise builds touching the cache (one kernel build
# at a time, also across concurrent callers).
with_lock() {
    local lock=$CACHE/.lock-$1; shift
    mkdir -p "$CACHE"
    exec 9>"$lock"
    if ! flock -n 9; then
        log "waiting for another build holding $lock"
        flock 9
    fi
    "$@"
}
