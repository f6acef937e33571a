#!/bin/sh
# /init of the ntprof-perf test VM (busybox-static). Copied into the initramfs by
# build-initramfs.sh. Protocol with run.sh:
#   9p tag "hostroot" = host /  (read-only)  -> /host
#   9p tag "out"      = host OUTDIR (rw)     -> /out, also bind-mounted at
#                       /host$NTPROF_OUT (same path as on the host) when possible,
#                       else at /host/tmp/ntprof-out
#   /host/tmp is a tmpfs (host /tmp at /hosttmp; paths of the script/repo under
#   /tmp are bind-mounted back).
#   $OUT/vm-env.sh (written by run.sh) sets NTPROF_SCRIPT (host path of the guest
#   test script), NTPROF_OUT (host path of OUTDIR), NTPROF_REPO, NTPROF_ARGS_FILE,
#   NTPROF_PCIE (1: wait for the emulated PCIe controller's namespace), NTPROF_DIGEST
#   (1: a second subsystem on nullb1, connected with header and data digests).
# Results: $OUT/guest-status = exit status of the test script ("setup-failed: ..."
# if the VM could not be set up), written before poweroff.
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
/bin/busybox --install -s /bin 2>/dev/null

msg() { echo "ntprof-vm: $*"; }
fail() {
    msg "SETUP FAILED: $*"
    [ -d /out ] && echo "setup-failed: $*" > /out/guest-status
    sync; poweroff -f; sleep 5; echo o > /proc/sysrq-trigger
}

mkdir -p /proc /sys /dev /tmp /host /out
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
exec 0</dev/console 1>/dev/console 2>&1
mount -t configfs configfs /sys/kernel/config || fail "configfs"
mount -t tracefs tracefs /sys/kernel/tracing || fail "tracefs"
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mount -t tmpfs tmpfs /dev/shm
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288,cache=loose,ro hostroot /host || fail "9p hostroot"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 out /out || fail "9p out"
echo -1 > /proc/sys/kernel/perf_event_paranoid
echo 0 > /proc/sys/kernel/kptr_restrict 2>/dev/null
ip link set lo up || ifconfig lo 127.0.0.1 up || fail "lo"
ip addr add 127.0.0.1/8 dev lo 2>/dev/null

[ -f /out/vm-env.sh ] || fail "no vm-env.sh in out dir"
. /out/vm-env.sh
msg "kernel $(uname -r), script $NTPROF_SCRIPT, out $NTPROF_OUT"

# --- make `chroot /host CMD` work: guest pseudo filesystems over the host's
# /tmp in the chroot is a fresh tmpfs; the host's /tmp stays reachable at /hosttmp
# and the script/repo/out paths that live under /tmp are bind-mounted back.
mkdir -p /hosttmp
mount --bind /host/tmp /hosttmp || fail "bind /host/tmp"
mount -t tmpfs tmpfs /host/tmp || fail "tmpfs /host/tmp"
for p in "$NTPROF_REPO" "$(dirname "$NTPROF_SCRIPT")"; do
    case $p in
        /tmp/*) [ -d "/host$p" ] && continue
                mkdir -p "/host$p" && mount --bind "/hosttmp${p#/tmp}" "/host$p" || fail "bind $p" ;;
    esac
done
for d in proc sys dev dev/shm sys/kernel/tracing sys/kernel/config; do
    mount --bind /$d /host/$d || fail "bind /$d"
done
mount -t tmpfs tmpfs /host/run 2>/dev/null
if [ -d "/host$NTPROF_OUT" ] || mkdir -p "/host$NTPROF_OUT" 2>/dev/null; then
    mount --bind /out "/host$NTPROF_OUT" || fail "bind out"
else
    mkdir -p /host/tmp/ntprof-out && mount --bind /out /host/tmp/ntprof-out || fail "bind out"
    NTPROF_OUT=/tmp/ntprof-out
fi

# --- NVMe/TCP target on loopback backed by null_blk, then connect the host side
NQN=${NTPROF_NQN:-ntprof-test}
i=0; while [ ! -b /dev/nullb0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
[ -b /dev/nullb0 ] || fail "/dev/nullb0 missing (null_blk)"
N=/sys/kernel/config/nvmet
[ -d $N ] || fail "$N missing (nvmet)"
subsystem() {   # subsystem NQN BACKING_DEV
    mkdir $N/subsystems/$1 || fail "nvmet subsystem $1"
    echo 1 > $N/subsystems/$1/attr_allow_any_host
    mkdir $N/subsystems/$1/namespaces/1
    echo -n "$2" > $N/subsystems/$1/namespaces/1/device_path
    echo 1 > $N/subsystems/$1/namespaces/1/enable || fail "nvmet namespace enable ($1)"
}
subsystem "$NQN" /dev/nullb0
mkdir $N/ports/1
echo tcp > $N/ports/1/addr_trtype
echo ipv4 > $N/ports/1/addr_adrfam
echo 127.0.0.1 > $N/ports/1/addr_traddr
echo 4420 > $N/ports/1/addr_trsvcid
ln -s $N/subsystems/$NQN $N/ports/1/subsystems/$NQN || fail "nvmet port link"

# The disk of the controller connected to subsystem NQN over TRANSPORT ("tcp", "pcie").
# Controller numbers follow probe order (the PCIe controller, probed at boot, usually
# takes nvme0), so nothing may assume /dev/nvme0n1.
disk_of() {   # disk_of TRANSPORT [NQN]
    for c in /sys/class/nvme/nvme*; do
        [ "$(cat "$c/transport" 2>/dev/null)" = "$1" ] || continue
        [ -z "${2:-}" ] || [ "$(cat "$c/subsysnqn" 2>/dev/null)" = "$2" ] || continue
        for n in "$c"/nvme*n*; do
            d=${n##*/}
            [ -b "/dev/$d" ] && { echo "/dev/$d"; return 0; }
            # Multipath: the controller holds a hidden path (nvmeXcYnZ, no device
            # node); the disk is its namespace head, nvmeXnZ.
            h=${d%%c*}n${d##*n}
            [ "$h" != "$d" ] && [ -b "/dev/$h" ] && { echo "/dev/$h"; return 0; }
        done
    done
    return 1
}
wait_disk() {   # wait_disk TRANSPORT [NQN]: print the disk once it exists (10 s at most)
    i=0
    while ! disk_of "$@" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
}
echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN" > /dev/nvme-fabrics || fail "nvme connect"
FABRICS=$(wait_disk tcp "$NQN")
[ -n "$FABRICS" ] || fail "the NVMe/TCP namespace of $NQN did not appear"
msg "$FABRICS ready over tcp ($(cat /sys/block/${FABRICS#/dev/}/size) sectors)"

DIGEST_DISK=
if [ "${NTPROF_DIGEST:-0}" = 1 ]; then
    # A subsystem of its own, so its controller and disk are told apart by NQN alone.
    [ -b /dev/nullb1 ] || fail "/dev/nullb1 missing (null_blk.nr_devices=2)"
    subsystem ntprof-digest /dev/nullb1
    ln -s $N/subsystems/ntprof-digest $N/ports/1/subsystems/ntprof-digest || fail "nvmet port link (digest)"
    echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=ntprof-digest,hdr_digest,data_digest" \
        > /dev/nvme-fabrics || fail "nvme connect with digests"
    DIGEST_DISK=$(wait_disk tcp ntprof-digest)
    [ -n "$DIGEST_DISK" ] || fail "the NVMe/TCP namespace of ntprof-digest did not appear"
    msg "$DIGEST_DISK ready over tcp with header and data digests"
fi

PCIE=
if [ "${NTPROF_PCIE:-0}" = 1 ]; then
    PCIE=$(wait_disk pcie)
    [ -n "$PCIE" ] || fail "the PCIe NVMe namespace did not appear (-device nvme)"
    msg "$PCIE ready over pcie ($(cat /sys/block/${PCIE#/dev/}/size) sectors)"
fi

# --- run the test script inside the host root
export NTPROF_OUT NTPROF_REPO NTPROF_SCRIPT NTPROF_NQN=$NQN NTPROF_DEV=$FABRICS
export NTPROF_FABRICS_DISK=$FABRICS NTPROF_PCIE_DISK=$PCIE NTPROF_DIGEST_DISK=$DIGEST_DISK
export HOME=/tmp TERM=dumb PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
set --
if [ -n "$NTPROF_ARGS_FILE" ] && [ -f "/out/$NTPROF_ARGS_FILE" ]; then
    while IFS= read -r a; do set -- "$@" "$a"; done < "/out/$NTPROF_ARGS_FILE"
fi
msg "=== running $NTPROF_SCRIPT $* ==="
if [ -x "/host$NTPROF_SCRIPT" ]; then
    chroot /host /bin/sh -c 'cd "$NTPROF_REPO" 2>/dev/null; exec "$0" "$@"' "$NTPROF_SCRIPT" "$@"
else
    chroot /host /bin/sh -c 'cd "$NTPROF_REPO" 2>/dev/null; exec /bin/sh "$0" "$@"' "$NTPROF_SCRIPT" "$@"
fi
rc=$?
msg "=== test exited with status $rc ==="
echo $rc > /out/guest-status
sync
umount "/host$NTPROF_OUT" /host/tmp/ntprof-out 2>/dev/null
umount /out 2>/dev/null
poweroff -f
