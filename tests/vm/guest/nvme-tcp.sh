#!/bin/sh
# Guest script for tests/vm_nvme_tcp.rs (run by tests/vm/run.sh --patches inside
# `chroot /host`): fio shapes with a known number of I/Os on $NTPROF_DEV, each traced
# by three `ntprof-perf record --profile nvme-tcp` processes at once (joint, --side
# host, --side target: each has its own perf rings, so all three see the same I/Os),
# then `merge` of the host-only and target-only CSVs, `stat`, `report`, and a
# `--sample 4` run.
#   nvme-tcp.sh NTPROF_PERF_BIN [NIOS]
# Writes to $NTPROF_OUT/nvme-tcp/:
#   list.txt                               ntprof-perf list
#   <shape>-{joint,host,target}.csv, .err  the three recordings and their stderr
#   <shape>-merged.csv, .err               merge host + target
#   <shape>-report.txt                     report of the joint CSV
#   <shape>-stat.txt, .err                 stat --interval 0
#   <shape>-sample4.csv, .err              record --sample 4
#   fio-<shape>-<run>.json                 fio's own account (total_ios)
set -eu
BIN=${1:?usage: nvme-tcp.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
DEV=${NTPROF_DEV:-/dev/nvme0n1}
O=$NTPROF_OUT/nvme-tcp
rm -rf "$O"; mkdir -p "$O"
echo "nvme-tcp: kernel $(uname -r), $DEV, $(nproc) cpus, $NIOS I/Os per run, bin $BIN"
"$BIN" list > "$O/list.txt" 2>&1 || { cat "$O/list.txt"; exit 1; }

fio_cmd() {   # fio_cmd SHAPE JSON_OUT
    case $1 in
        randread-4k) rw=randread bs=4k ;;
        randwrite-4k) rw=randwrite bs=4k ;;
        write-128k) rw=write bs=128k ;;
        *) echo "unknown shape $1" >&2; exit 1 ;;
    esac
    echo fio --name="$1" --filename="$DEV" --direct=1 --ioengine=psync --rw=$rw --bs=$bs \
        --number_ios="$NIOS" --size=64m --randrepeat=0 --output-format=json --output="$2"
}

for shape in randread-4k randwrite-4k write-128k; do
    echo "nvme-tcp: $shape: host-only and target-only recorders"
    "$BIN" record --profile nvme-tcp --side host -o "$O/$shape-host.csv" 2> "$O/$shape-host.err" &
    hpid=$!
    "$BIN" record --profile nvme-tcp --side target -o "$O/$shape-target.csv" 2> "$O/$shape-target.err" &
    tpid=$!
    # Both have opened and enabled their events well within this (TCG guest).
    sleep 3
    kill -0 $hpid && kill -0 $tpid || { cat "$O/$shape-host.err" "$O/$shape-target.err"; exit 1; }
    echo "nvme-tcp: $shape: joint record"
    # shellcheck disable=SC2046 # fio_cmd prints plain words, split on purpose
    "$BIN" record --profile nvme-tcp -o "$O/$shape-joint.csv" -- \
        $(fio_cmd "$shape" "$O/fio-$shape-joint.json") 2> "$O/$shape-joint.err" \
        || { cat "$O/$shape-joint.err"; exit 1; }
    sleep 1
    kill -INT $hpid $tpid
    wait $hpid || { cat "$O/$shape-host.err"; exit 1; }
    wait $tpid || { cat "$O/$shape-target.err"; exit 1; }
    cat "$O/$shape-joint.err" "$O/$shape-host.err" "$O/$shape-target.err"
    "$BIN" merge "$O/$shape-host.csv" "$O/$shape-target.csv" -o "$O/$shape-merged.csv" \
        2> "$O/$shape-merged.err" || { cat "$O/$shape-merged.err"; exit 1; }
    cat "$O/$shape-merged.err"
    "$BIN" report "$O/$shape-joint.csv" > "$O/$shape-report.txt" 2>&1 \
        || { cat "$O/$shape-report.txt"; exit 1; }

    echo "nvme-tcp: $shape: stat"
    # shellcheck disable=SC2046
    "$BIN" stat --profile nvme-tcp --interval 0 -- $(fio_cmd "$shape" "$O/fio-$shape-stat.json") \
        > "$O/$shape-stat.txt" 2> "$O/$shape-stat.err" || { cat "$O/$shape-stat.err"; exit 1; }
    cat "$O/$shape-stat.txt"

    echo "nvme-tcp: $shape: record --sample 4"
    # shellcheck disable=SC2046
    "$BIN" record --profile nvme-tcp --sample 4 -o "$O/$shape-sample4.csv" -- \
        $(fio_cmd "$shape" "$O/fio-$shape-sample4.json") 2> "$O/$shape-sample4.err" \
        || { cat "$O/$shape-sample4.err"; exit 1; }
    cat "$O/$shape-sample4.err"
done
echo "nvme-tcp: done"
