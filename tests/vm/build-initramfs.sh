#!/usr/bin/env bash
# build-initramfs.sh
#
# Builds (or fetches from cache) the busybox-static initramfs of the test VM and
# prints its path on stdout: ${NTPROF_VM_CACHE}/initramfs/<key>/initramfs.cpio
# (uncompressed newc cpio). Key = sha256 of (busybox binary, tests/vm/init.sh).
# The initramfs holds only /bin/busybox and /init (= tests/vm/init.sh); all
# test tooling comes from the host root over 9p (see init.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

ensure_pkgs busybox-static cpio util-linux
BB=/bin/busybox
[ -x $BB ] && file -L $BB 2>/dev/null | grep -q dynamic && die "$BB is not static"
KEY=$( { sha256sum < $BB; sha256sum < "$VM_DIR/init.sh"; } | sha256sum | cut -c1-16)
OUT=$CACHE/initramfs/$KEY
if [ -s "$OUT/initramfs.cpio" ]; then echo "$OUT/initramfs.cpio"; exit 0; fi
build() {
    [ -s "$OUT/initramfs.cpio" ] && return 0
    local root; root=$(mktemp -d)
    mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,host,out,etc,usr/bin,usr/sbin}
    cp $BB "$root/bin/busybox"
    ln -s busybox "$root/bin/sh"
    install -m 0755 "$VM_DIR/init.sh" "$root/init"
    mkdir -p "$OUT"
    (cd "$root" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --owner=0:0 --quiet) > "$OUT/initramfs.cpio.tmp"
    mv "$OUT/initramfs.cpio.tmp" "$OUT/initramfs.cpio"
    rm -rf "$root"
    log "initramfs -> $OUT/initramfs.cpio"
}
with_lock initramfs build
echo "$OUT/initramfs.cpio"
