#!/usr/bin/env bash
# run.sh [--patches] [--digest] [--multipath] [--nullb-delay-us US] [--timeout SEC] GUEST_SCRIPT OUTDIR [ARGS...]
#
# Boots the NVMe/TCP test VM (QEMU TCG, 2 vCPUs, 1 GiB) and runs GUEST_SCRIPT in it.
#   GUEST_SCRIPT  host path of a script; in the guest it runs inside the host root
#                 (`chroot /host`), cwd = repo root, as `GUEST_SCRIPT ARGS...` if it
#                 is executable (shebang honoured) else `/bin/sh GUEST_SCRIPT ARGS...`.
#   OUTDIR        host directory (created) shared read-write with the guest; it is
#                 visible in the chroot at the same path. Gets console.log,
#                 guest-status, vm-env.sh, plus whatever the script writes.
#   --patches     boot the kernel built with kernel_change/apply.sh (uname -r *-ntprof).
#   --digest      also export a second subsystem (ntprof-digest, null_blk /dev/nullb1)
#                 on the same port and connect to it with header and data digests.
#   --multipath   NVMe native multipath on, as distribution kernels boot: the NVMe/TCP
#                 namespace is a head disk (nvmeXnZ, bio-based) whose I/O goes to a
#                 hidden path disk (nvmeXcYnZ) of the controller. Off by default
#                 (nvme_core.multipath=N): one request-based disk per namespace.
#   --nullb-delay-us US  null_blk completes each I/O US µs later (timer mode). On
#                 loopback the host queue, the target queue and the submitter share
#                 a CPU, and the high-priority nvme-tcp/nvmet-tcp workers finish each
#                 command before the submitter runs again: without a device delay
#                 NVMe/TCP never has two commands in flight, whatever fio's iodepth.
#   --timeout S   kill QEMU after S seconds (default ${NTPROF_VM_TIMEOUT:-300}).
# Exit status: 0 only if the guest script ran and exited 0. Otherwise non-zero and
# the tail of OUTDIR/console.log is printed (2 = guest setup failed / no status,
# 3 = timeout, else the script's own status, capped to 1..255).
#
# The guest script's environment:
#   NTPROF_OUT     = OUTDIR (same path as on the host, writable)
#   NTPROF_REPO    = host path of this repo checkout (derived from run.sh's location)
#   NTPROF_FABRICS_DISK = the NVMe/TCP namespace over 127.0.0.1:4420 (/dev/nvmeXnY),
#                    backed by null_blk /dev/nullb0 on the in-guest nvmet target; found
#                    by its controller's transport (tcp), as controller numbering
#                    depends on probe order
#   NTPROF_DEV     = NTPROF_FABRICS_DISK (the disk the older scripts use)
#   NTPROF_PCIE_DISK = the namespace of the QEMU-emulated PCIe controller (transport
#                    pcie, nsid 2, backed by OUTDIR/pcie-nvme.img), empty without one
#   NTPROF_DIGEST_DISK = with --digest: the NVMe/TCP namespace connected with
#                    hdr_digest,data_digest; else empty
#   NTPROF_NQN     = ntprof-test (subsystem NQN)
#   NTPROF_SCRIPT  = GUEST_SCRIPT; HOME=/tmp (tmpfs); /sys/kernel/tracing mounted;
#                    perf_event_paranoid = -1; everything runs as root.
# Env: NTPROF_VM_CACHE (cache dir, default /var/cache/ntprof-perf-vm),
#      NTPROF_VM_TIMEOUT, NTPROF_VM_MEM (default 1G), NTPROF_VM_SMP (default 2),
#      NTPROF_VM_APPEND (extra kernel cmdline), NTPROF_VM_VERBOSE=1 (console to
#      stderr too), NTPROF_VM_INTERACTIVE=1 (console on the terminal, no timeout:
#      `NTPROF_VM_INTERACTIVE=1 run.sh /bin/bash /tmp/o` gives a shell in the
#      guest's chroot; `poweroff -f` is not in the chroot, just exit the shell),
#      NTPROF_VM_PCIE=0 (no emulated PCIe NVMe controller; default 1),
#      NTPROF_VM_PCIE_MB (its backing file's size, default 256),
#      NTPROF_VM_KSRC, NTPROF_VM_JOBS (see build-kernel.sh).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

PATCHES=() TIMEOUT=${NTPROF_VM_TIMEOUT:-300} DIGEST=0 NULLB= MPATH=nvme_core.multipath=N
while [ $# -gt 0 ]; do
    case $1 in
        --patches) PATCHES=(--patches); shift ;;
        --digest) DIGEST=1; shift ;;
        --multipath) MPATH=; shift ;;
        --nullb-delay-us) NULLB="null_blk.irqmode=2 null_blk.completion_nsec=$(($2 * 1000))"; shift 2 ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        -*) die "unknown option $1" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] || die "usage: $0 [--patches] [--digest] [--multipath] [--nullb-delay-us US] [--timeout SEC] GUEST_SCRIPT OUTDIR [ARGS...]"
SCRIPT=$(realpath -e "$1") || die "guest script $1 not found"
mkdir -p "$2"; OUTDIR=$(realpath -e "$2"); shift 2
case $OUTDIR$SCRIPT$REPO_ROOT in *[[:space:]\'\"]*) die "paths with spaces/quotes are not supported" ;; esac

ensure_pkgs qemu-system-x86 coreutils
KDIR=$("$VM_DIR/build-kernel.sh" "${PATCHES[@]}") || die "kernel build failed"
INITRD=$("$VM_DIR/build-initramfs.sh") || die "initramfs build failed"

rm -f "$OUTDIR/guest-status" "$OUTDIR/console.log"
q() { printf "'%s'" "${1//\'/\'\\\'\'}"; }
{
    echo "NTPROF_SCRIPT=$(q "$SCRIPT")"
    echo "NTPROF_OUT=$(q "$OUTDIR")"
    echo "NTPROF_REPO=$(q "$REPO_ROOT")"
    echo "NTPROF_ARGS_FILE=vm-args"
    echo "NTPROF_PCIE=${NTPROF_VM_PCIE:-1}"
    echo "NTPROF_DIGEST=$DIGEST"
} > "$OUTDIR/vm-env.sh"
: > "$OUTDIR/vm-args"
for a in "$@"; do printf '%s\n' "$a" >> "$OUTDIR/vm-args"; done

# nullb1 backs the digest subsystem (when --digest); an idle null_blk costs nothing.
APPEND="console=ttyS0 panic=-1 oops=panic quiet loglevel=4 null_blk.gb=1 null_blk.nr_devices=2 $NULLB $MPATH ${NTPROF_VM_APPEND:-}"
QEMU=(qemu-system-x86_64 -accel tcg,thread=multi -cpu max
      -smp "${NTPROF_VM_SMP:-2}" -m "${NTPROF_VM_MEM:-1G}"
      -kernel "$KDIR/vmlinux" -initrd "$INITRD" -append "$APPEND"
      -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap
      -virtfs local,path="$OUTDIR",mount_tag=out,security_model=none,multidevs=remap
      -nographic -nodefaults -serial stdio -no-reboot)
if [ "${NTPROF_VM_PCIE:-1}" = 1 ]; then
    # A sparse file, fresh each boot: the PCIe controller's namespace must start
    # zeroed and cost no disk. nsid 2, so that --nsid tells it from the fabrics one.
    IMG=$OUTDIR/pcie-nvme.img
    rm -f "$IMG"
    truncate -s "${NTPROF_VM_PCIE_MB:-256}M" "$IMG"
    QEMU+=(-drive "file=$IMG,if=none,id=nvm,format=raw,cache=unsafe"
           -device nvme,id=nvmepci,serial=ntprof
           -device nvme-ns,bus=nvmepci,drive=nvm,nsid=2)
fi
log "booting $(cat "$KDIR/kernelrelease") ($KDIR), timeout ${TIMEOUT}s, console: $OUTDIR/console.log"
t0=$SECONDS rc=0
if [ "${NTPROF_VM_INTERACTIVE:-0}" = 1 ]; then   # console on this terminal, no timeout
    "${QEMU[@]}" 2>&1 | tee "$OUTDIR/console.log" || rc=${PIPESTATUS[0]}
elif [ "${NTPROF_VM_VERBOSE:-0}" = 1 ]; then
    timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | tee "$OUTDIR/console.log" >&2 || rc=${PIPESTATUS[0]}
else
    timeout -k 10 "$TIMEOUT" "${QEMU[@]}" </dev/null >"$OUTDIR/console.log" 2>&1 || rc=$?
fi
log "VM finished in $((SECONDS - t0)) s (qemu status $rc)"

fail_tail() {   # fail_tail STATUS MESSAGE
    echo "----- last 40 lines of $OUTDIR/console.log -----" >&2
    tail -n 40 "$OUTDIR/console.log" | tr -d '\r' >&2
    echo "-----" >&2
    printf '[vm] ERROR: %s\n' "$2" >&2
    exit "$1"
}
if [ $rc = 124 ] || [ $rc = 137 ]; then fail_tail 3 "VM timed out after ${TIMEOUT}s"; fi
[ -s "$OUTDIR/guest-status" ] || fail_tail 2 "guest did not report a status (did not reach the test? qemu status $rc)"
status=$(cat "$OUTDIR/guest-status")
case $status in
    0) log "guest test passed"; exit 0 ;;
    [0-9]*) fail_tail $(( status > 255 ? 255 : status )) "guest test exited with status $status" ;;
    *) fail_tail 2 "guest: $status" ;;
esac
