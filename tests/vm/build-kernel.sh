#!/usr/bin/env bash
# build-kernel.sh [--patches] [--force]
#
# Builds (or fetches from cache) a minimal x86-64 guest kernel for the
# ntprof-perf NVMe/TCP test VM and prints the directory holding it on stdout:
#     <dir>/vmlinux        PVH-bootable kernel (qemu -kernel <dir>/vmlinux)
#     <dir>/kernelrelease  what `uname -r` reports in the guest
#     <dir>/config         the final .config
#
#   --patches  apply the repo's tracepoint patch series first
#              (<repo>/kernel_change/apply.sh <tree>) and set
#              CONFIG_LOCALVERSION="-ntprof" (guest uname -r: e.g. 6.1.192-ntprof).
#              Without it the kernel is pristine Debian source (e.g. 6.1.192).
#   --force    rebuild even if the cache has a kernel for this key.
#
# Source: ${NTPROF_VM_KSRC:-/usr/src/linux-source-6.1.tar.xz} (Debian linux-source-6.1;
#         NTPROF_VM_KSRC=/usr/src/linux-source-6.12.tar.xz for a 6.12 guest: the package
#         named by the tarball is installed when it is missing).
# Config: `make tinyconfig` + tests/vm/kernel.config, `make olddefconfig`, then every
#         symbol of the fragment is checked; the build fails naming any that did not stick.
# Cache:  ${NTPROF_VM_CACHE:-/var/cache/ntprof-perf-vm}
#           src/<srcver>/pristine/    extracted source (never modified)
#           src/<srcver>/patched/     copy of pristine + apply.sh (rsync'd, so
#                                     only changed files get new mtimes -> incremental)
#           obj/<srcver>-{plain,patched}/  out-of-tree (O=) build dirs, reused
#           kernels/<key>/            finished kernels; key = sha256 of (source
#                                     package version, kernel.config, variant, and for
#                                     --patches the path+content of the files apply.sh
#                                     uses: kernel_change/{apply.sh,include/,patches/<6.1>/})
# Env:    NTPROF_VM_CACHE, NTPROF_VM_KSRC, NTPROF_VM_JOBS (make -j, default 2).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PATCHES=0 FORCE=0
for a in "$@"; do
    case $a in
        --patches) PATCHES=1 ;;
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $a" ;;
    esac
done

FRAGMENT=$VM_DIR/kernel.config
KCHANGE=$REPO_ROOT/kernel_change
KEY_SCHEMA=1   # bump to invalidate all cached kernels

ensure_pkgs build-essential flex bison bc libelf-dev libssl-dev cpio rsync xz-utils util-linux
[ -f "$KSRC_TARBALL" ] || ensure_pkgs "$(basename "$KSRC_TARBALL" .tar.xz)"
[ -f "$KSRC_TARBALL" ] || die "kernel source $KSRC_TARBALL not found"

if [ $PATCHES = 1 ]; then
    [ -f "$KCHANGE/apply.sh" ] || die "--patches: $KCHANGE/apply.sh does not exist (yet); cannot build a patched kernel"
    VARIANT=patched LOCALVERSION=-ntprof
else
    VARIANT=plain LOCALVERSION=
fi

SRCVER=$(ksrc_version)
KGEN=$(echo "$SRCVER" | sed -n 's/^[^=]*=\([0-9]*\.[0-9]*\).*/\1/p')   # e.g. 6.1
# The lines of the fragment that set something: comments and blank lines do not
# change the kernel, so editing them must not cost a rebuild.
fragment_lines() { grep -E '^(CONFIG_|# CONFIG_[A-Za-z0-9_]+ is not set)' "$FRAGMENT"; }

compute_key() {
    {
        echo "schema=$KEY_SCHEMA"
        echo "src=$SRCVER"
        echo "variant=$VARIANT localversion=$LOCALVERSION"
        echo "--- fragment"; fragment_lines
        if [ $PATCHES = 1 ]; then
            # What apply.sh uses: itself, include/, patches/<major.minor>/ (all of
            # patches/ if the generation cannot be told from the package version).
            local pdir=patches
            [ -n "$KGEN" ] && [ -d "$KCHANGE/patches/$KGEN" ] && pdir=patches/$KGEN
            echo "--- kernel_change ($pdir)"
            (cd "$KCHANGE" && find apply.sh include "$pdir" -type f ! -name '*~' ! -name '*.swp' \
                ! -name '*.orig' ! -name '*.rej' -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 -r sha256sum)
        fi
    } | sha256sum | cut -c1-16
}
KEY=$(compute_key)
OUT=$CACHE/kernels/$VARIANT-$KEY
if [ $FORCE = 0 ] && [ -s "$OUT/vmlinux" ] && [ -s "$OUT/kernelrelease" ]; then
    log "cached kernel $VARIANT-$KEY ($(cat "$OUT/kernelrelease"))"
    echo "$OUT"; exit 0
fi

build() {
    # Re-key and re-check after taking the lock: kernel_change/ may have changed
    # while we waited, and someone else may just have built this kernel.
    KEY=$(compute_key); OUT=$CACHE/kernels/$VARIANT-$KEY
    if [ $FORCE = 0 ] && [ -s "$OUT/vmlinux" ] && [ -s "$OUT/kernelrelease" ]; then
        log "cached kernel $VARIANT-$KEY ($(cat "$OUT/kernelrelease"))"; return 0
    fi
    local sdir=$CACHE/src/$(echo "$SRCVER" | tr -c 'A-Za-z0-9.+_-' _)
    local pristine=$sdir/pristine
    if [ ! -f "$pristine/.ntprof-extracted" ]; then
        log "extracting $KSRC_TARBALL -> $pristine"
        rm -rf "$pristine"; mkdir -p "$pristine"
        tar -xf "$KSRC_TARBALL" -C "$pristine" --strip-components=1
        touch "$pristine/.ntprof-extracted"
    fi
    local tree=$pristine
    if [ $PATCHES = 1 ]; then
        tree=$sdir/patched
        log "syncing pristine -> $tree"
        mkdir -p "$tree"
        # No -t: files whose content differs get a fresh mtime, so make rebuilds
        # exactly what changed since the last patched build (incl. reverted files).
        rsync -rlpc --delete --exclude=.ntprof-extracted "$pristine/" "$tree/"
        log "applying patches: $KCHANGE/apply.sh $tree"
        "$KCHANGE/apply.sh" "$tree" >&2 || die "$KCHANGE/apply.sh $tree failed"
        [ "$(compute_key)" = "$KEY" ] || die "kernel_change/ changed while it was being applied; run again"
    fi
    local obj=$CACHE/obj/$(basename "$sdir")-$VARIANT
    mkdir -p "$obj"
    # Clean environment: the caller's ARCH/CC/KCFLAGS/MAKEFLAGS/... must neither
    # change the kernel nor force full rebuilds of the kept build tree.
    local mk=(env -i PATH="/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
              HOME="${HOME:-/root}" LC_ALL=C make -C "$tree" O="$obj" -j"$JOBS")
    configure() {
    log "configuring in $obj (tinyconfig + $FRAGMENT)"
    # Keep the previous .config (with its mtime): if the new one is identical it is
    # put back, so make does not re-sync the config, which would relink objtool
    # and with it recompile every object (a full rebuild).
    [ -f "$obj/.config" ] && cp -p "$obj/.config" "$obj/.config.ntprof-prev"
    "${mk[@]}" -s tinyconfig >"$obj/config.log" 2>&1 || { cat "$obj/config.log" >&2; die "make tinyconfig failed"; }
    local cfg=(scripts/config --file "$obj/.config") line sym val
    while IFS= read -r line; do
        if [[ $line =~ ^CONFIG_([A-Za-z0-9_]+)=(.*)$ ]]; then
            sym=${BASH_REMATCH[1]} val=${BASH_REMATCH[2]}
            case $val in
                y) (cd "$tree" && "${cfg[@]}" --enable "$sym") ;;
                m) (cd "$tree" && "${cfg[@]}" --module "$sym") ;;
                \"*\") (cd "$tree" && "${cfg[@]}" --set-str "$sym" "${val:1:${#val}-2}") ;;
                *) (cd "$tree" && "${cfg[@]}" --set-val "$sym" "$val") ;;
            esac
        elif [[ $line =~ ^#\ CONFIG_([A-Za-z0-9_]+)\ is\ not\ set ]]; then
            (cd "$tree" && "${cfg[@]}" --disable "${BASH_REMATCH[1]}")
        fi
    done < "$FRAGMENT"
    (cd "$tree" && "${cfg[@]}" --set-str LOCALVERSION "$LOCALVERSION")
    "${mk[@]}" -s olddefconfig >>"$obj/config.log" 2>&1 || { cat "$obj/config.log" >&2; die "make olddefconfig failed"; }
    # Every symbol of the fragment must have stuck.
    local bad=()
    while IFS= read -r line; do
        if [[ $line =~ ^CONFIG_([A-Za-z0-9_]+)=(.*)$ ]]; then
            sym=${BASH_REMATCH[1]}
            [ "$sym" = LOCALVERSION ] && continue
            grep -qxF "$line" "$obj/.config" || bad+=("$line (got: $(grep -E "^(# )?CONFIG_${sym}[= ]" "$obj/.config" || echo unset))")
        elif [[ $line =~ ^#\ CONFIG_([A-Za-z0-9_]+)\ is\ not\ set ]]; then
            sym=${BASH_REMATCH[1]}
            grep -qE "^CONFIG_${sym}=" "$obj/.config" && bad+=("CONFIG_$sym must be unset (got: $(grep -E "^CONFIG_${sym}=" "$obj/.config"))")
        fi
    done < "$FRAGMENT"
    grep -qxF "CONFIG_LOCALVERSION=\"$LOCALVERSION\"" "$obj/.config" || bad+=("CONFIG_LOCALVERSION=\"$LOCALVERSION\"")
    if [ ${#bad[@]} -gt 0 ]; then
        printf '[vm] ERROR: config symbol did not stick: %s\n' "${bad[@]}" >&2
        exit 1
    fi
    if [ -f "$obj/.config.ntprof-prev" ] && cmp -s "$obj/.config" "$obj/.config.ntprof-prev"; then
        cp -p "$obj/.config.ntprof-prev" "$obj/.config"
    fi
    rm -f "$obj/.config.ntprof-prev"
    }
    local cfgkey; cfgkey=$( { echo "$SRCVER $LOCALVERSION"; fragment_lines; } | sha256sum | cut -c1-16)
    if [ -f "$obj/.config" ] && [ "$(cat "$obj/.ntprof-cfgkey" 2>/dev/null)" = "$cfgkey" ]; then
        log "config unchanged in $obj (fragment key $cfgkey): not re-running tinyconfig"
    else
        rm -f "$obj/.ntprof-cfgkey"
        configure
        echo "$cfgkey" > "$obj/.ntprof-cfgkey"
    fi
    log "building vmlinux (make -j$JOBS) in $obj; log: $obj/build.log"
    local t0=$SECONDS
    if ! "${mk[@]}" vmlinux >"$obj/build.log" 2>&1; then
        tail -n 40 "$obj/build.log" >&2
        die "kernel build failed (full log: $obj/build.log)"
    fi
    log "vmlinux built in $((SECONDS - t0)) s"
    local krel; krel=$("${mk[@]}" -s kernelrelease)
    mkdir -p "$OUT.tmp"
    cp "$obj/vmlinux" "$OUT.tmp/vmlinux"
    cp "$obj/.config" "$OUT.tmp/config"
    echo "$krel" > "$OUT.tmp/kernelrelease"
    rm -rf "$OUT"; mv "$OUT.tmp" "$OUT"
    log "kernel $krel -> $OUT"
}
with_lock kernel build
echo "$OUT"
