#!/bin/sh
# Guest script for tests/vm_nvme_tcp.rs nvme_tcp_through_native_multipath (run by
# tests/vm/run.sh --patches --multipath inside `chroot /host`): the NVMe/TCP namespace
# is a multipath head (nvmeXnZ, bio-based) whose bios become requests on a hidden path
# disk (nvmeXcYnZ), as on distribution kernels.
#   multipath.sh NTPROF_PERF_BIN [NIOS]
# Writes to $NTPROF_OUT/multipath/:
#   head, paths                 the head traced and the hidden path disks (/sys/block)
#   qd1.csv, .err, fio-qd1.json record --profile nvme-tcp of fio 4k randread, psync
#   qd8.csv, .err, fio-qd8.json the same of 4k randwrite, libaio QD8, 2 jobs
#   block-head.err, .status     record --profile block -d HEAD (refused: exit status)
#   nvme.csv, .err, fio-nvme.json  record --profile nvme of 4k randread, psync
#   nvme-w.csv, .err, fio-nvme-w.json  record --profile nvme of NIOS 128k writes
#                               (psync) and nothing else: on 6.1 NVMe/TCP a write that
#                               needs an R2T completes with a wrong cid, which the
#                               path's block completion corrects once the path's number
#                               is learned (from the command in flight at its sector)
#   bio.err, .status            record --profile bio (no other bio-based disk: refused)
set -eu
BIN=${1:?usage: multipath.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
DEV=${NTPROF_FABRICS_DISK:?no NVMe/TCP disk in the environment}
O=$NTPROF_OUT/multipath
rm -rf "$O"; mkdir -p "$O"
echo "${DEV##*/}" > "$O/head"
ls /sys/block | grep -E '^nvme[0-9]+c[0-9]+n[0-9]+$' > "$O/paths" || true
echo "multipath: $DEV over $(tr '\n' ' ' < "$O/paths")"
fio_run() {   # fio_run NAME PROFILE FIO_ARGS...
    name=$1 profile=$2; shift 2
    "$BIN" record -p "$profile" -o "$O/$name.csv" -- fio --name="$name" --filename="$DEV" \
        --direct=1 --bs=4k --size=64m --output-format=json --output="$O/fio-$name.json" \
        "$@" 2> "$O/$name.err" || { cat "$O/$name.err"; exit 1; }
    tail -1 "$O/$name.err"
}
fio_run qd1 nvme-tcp --rw=randread --ioengine=psync --number_ios="$NIOS"
fio_run qd8 nvme-tcp --rw=randwrite --ioengine=libaio --iodepth=8 --numjobs=2 \
    --cpus_allowed=0-1 --cpus_allowed_policy=split --offset_increment=64m --number_ios="$NIOS"
fio_run nvme nvme --rw=randread --ioengine=psync --number_ios="$NIOS"
fio_run nvme-w nvme --rw=randwrite --bs=128k --ioengine=psync --number_ios="$NIOS"
status=0
"$BIN" record -p block -d "$DEV" -o "$O/block-head.csv" -- true 2> "$O/block-head.err" || status=$?
echo "$status" > "$O/block-head.status"
status=0
"$BIN" record -p bio -o "$O/bio.csv" -- true 2> "$O/bio.err" || status=$?
echo "$status" > "$O/bio.status"
