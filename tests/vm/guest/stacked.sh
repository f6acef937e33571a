#!/bin/sh
# Guest script for tests/vm_stacked.rs (run by tests/vm/run.sh inside `chroot /host`):
#   stacked.sh NTPROF_PERF_BIN [NIOS]
# 1. The bio profile on a device-mapper linear target over a loop device (on tmpfs):
#    fio shapes with a known number of I/Os under `record --profile bio -d dm-N`.
# 2. Hot sectors: concurrent reads of a 64 KiB region of the NVMe/TCP disk (libaio,
#    QD 32, two jobs) under `record --profile nvme`, and `--profile nvme-tcp` when the
#    kernel has its events.
#    Then a second dm-linear over the first, traced alone (`-d` the top): rows name the
#    loop device at the bottom.
# Writes to $NTPROF_OUT/stacked/: stack ("dm-N loopM OFFSET"), stack2 ("dm-TOP dm-N loopM
# OFFSET+OFFSET2"), <name>.csv/.err/.report,
# fio-<name>.json. Exits non-zero on the first command that fails.
set -eu
BIN=${1:?usage: stacked.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
O=$NTPROF_OUT/stacked
OFFSET=4096
rm -rf "$O"; mkdir -p "$O"

run() {   # run NAME PROFILE_FLAGS... -- FIO_ARGS...
    n=$1; shift
    flags=""
    while [ "$1" != "--" ]; do flags="$flags $1"; shift; done
    shift
    echo "stacked: record$flags ($n)"
    # shellcheck disable=SC2086 # flags are plain words, split on purpose
    "$BIN" record $flags -o "$O/$n.csv" -- fio --name="$n" --direct=1 --randrepeat=0 \
        --output-format=json --output="$O/fio-$n.json" "$@" 2> "$O/$n.err" \
        || { cat "$O/$n.err"; exit 1; }
    cat "$O/$n.err"
    "$BIN" report "$O/$n.csv" > "$O/$n.report" 2>&1 || { cat "$O/$n.report"; exit 1; }
}

# --- 1. dm-linear over loop
truncate -s 160M /tmp/stacked.img
LOOP=$(losetup -f --show /tmp/stacked.img)
dmsetup create --noudevsync ntprof-lin --table "0 262144 linear $LOOP $OFFSET"
DM=dm-$(dmsetup info -c --noheadings -o minor ntprof-lin | tr -d ' ')
[ -b "/dev/$DM" ] || { echo "no /dev/$DM"; exit 1; }
echo "$DM ${LOOP##*/} $OFFSET" > "$O/stack"
"$BIN" list > "$O/list.txt" 2>&1
run bio-randwrite-4k --profile bio -d "$DM" -- --filename="/dev/$DM" --ioengine=psync \
    --rw=randwrite --bs=4k --size=64m --number_ios="$NIOS"
run bio-read-64k --profile bio -d "$DM" -- --filename="/dev/$DM" --ioengine=libaio \
    --iodepth=8 --rw=read --bs=64k --size=64m --number_ios="$NIOS"
# Two levels: dm-linear over that dm-linear, traced at the top only; each bio must name
# the loop device at the bottom, at both tables' offsets.
OFFSET2=2048
dmsetup create --noudevsync ntprof-top --table "0 131072 linear /dev/$DM $OFFSET2"
TOP=dm-$(dmsetup info -c --noheadings -o minor ntprof-top | tr -d ' ')
[ -b "/dev/$TOP" ] || { echo "no /dev/$TOP"; exit 1; }
echo "$TOP $DM ${LOOP##*/} $((OFFSET + OFFSET2))" > "$O/stack2"
run bio-two-levels --profile bio -d "$TOP" -- --filename="/dev/$TOP" --ioengine=psync \
    --rw=randwrite --bs=4k --size=32m --number_ios="$NIOS"
dmsetup remove --noudevsync ntprof-top
dmsetup remove --noudevsync ntprof-lin
losetup -d "$LOOP"

# --- 2. hot sectors on the NVMe/TCP disk
DISK=
for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/transport")" = tcp ] && DISK=/dev/${c##*/}n1 && break
done
[ -n "$DISK" ] || { echo "no NVMe/TCP disk"; exit 1; }
echo "$DISK" > "$O/disk"
HOT="--filename=$DISK --ioengine=libaio --iodepth=32 --numjobs=2 --rw=randread --bs=4k --size=64k --norandommap --io_size=$((NIOS * 4))k"
# shellcheck disable=SC2086
run hot-nvme --profile nvme -- $HOT
if grep -q '^nvme-tcp  *supported' "$O/list.txt"; then
    # shellcheck disable=SC2086
    run hot-nvme-tcp --profile nvme-tcp -- $HOT
fi
# --- 3. in-kernel sampling on the nvme and nvmet profiles: 1 in 4 commands by cid
for p in nvme nvmet; do
    run "sample-$p" --profile "$p" --sample 4 -- --filename="$DISK" --ioengine=psync \
        --rw=randread --bs=4k --size=64m --number_ios=$((NIOS * 2))
done
echo "stacked: done"
