#!/bin/sh
# Guest script for tests/vm_nvme_tcp.rs (run by tests/vm/run.sh --patches [--digest]
# inside `chroot /host`): fio shapes with a known number of I/Os, each traced by three
# `ntprof-perf record --profile nvme-tcp` processes at once (joint, --side host,
# --side target: each has its own perf rings, so all three see the same I/Os), then
# `merge` of the host-only and target-only CSVs and `report`; the QD1 shapes also get
# `stat` and a `--sample 4` run.
#   nvme-tcp.sh NTPROF_PERF_BIN [NIOS [SHAPE...]]   (default: the shapes below)
# Shapes: randread-4k, randwrite-4k, write-128k (psync, NIOS I/Os) on the NVMe/TCP disk;
# qd8-randread-4k, qd8-randwrite-4k, qd8-randwrite-128k (libaio, iodepth 8, 2 jobs
# pinned one per CPU, 2×NIOS I/Os each) on the same disk, so both I/O queues carry
# several commands at once and command ids come back; and, when the rig connected
# with digests (run.sh --digest), digest-<psync shape> on that controller's disk.
# On request only: hot-randwrite-128k (QD8, 2 jobs, 8 blocks: same-sector commands
# in flight at once).
# Writes to $NTPROF_OUT/nvme-tcp/:
#   list.txt                               ntprof-perf list
#   shapes                                 the shapes run, one a line
#   ctrl, digest-ctrl                      "<instance> <cntlid> <disk>" of the controllers
#   <shape>-{joint,host,target}.csv, .err  the three recordings and their stderr
#   <shape>-merged.csv, .err               merge host + target
#   <shape>-report.txt                     report of the joint CSV
#   <shape>-stat.txt, .err                 stat --interval 0 (QD1 shapes)
#   <shape>-sample4.csv, .err              record --sample 4 (QD1 shapes)
#   <shape>-joint2.csv, .err               the joint record with --threads 2 (QD8 shapes)
#   fio-<shape>-<run>.json                 fio's own account (total_ios)
#   overflow.csv, .err, fio-overflow.json  (default shapes only) the joint record with
#                                          --mmap-pages 1 under libaio reads at depth 32
#                                          from two jobs: sustained ring overflow
set -eu
BIN=${1:?usage: nvme-tcp.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
DEV=${NTPROF_FABRICS_DISK:-${NTPROF_DEV:?no NVMe/TCP disk in the environment}}
DIGEST=${NTPROF_DIGEST_DISK:-}
O=$NTPROF_OUT/nvme-tcp
rm -rf "$O"; mkdir -p "$O"
echo "nvme-tcp: kernel $(uname -r), $DEV, digests: ${DIGEST:-none}, $(nproc) cpus, $NIOS I/Os per run, bin $BIN"
"$BIN" list > "$O/list.txt" 2>&1 || { cat "$O/list.txt"; exit 1; }
ctrl_of() {   # ctrl_of DISK: "<instance> <cntlid> <disk>"
    n=${1##*/}; i=${n#nvme}; i=${i%%n*}
    echo "$i $(cat "/sys/class/nvme/nvme$i/cntlid") $n"
}
ctrl_of "$DEV" > "$O/ctrl"
[ -z "$DIGEST" ] || ctrl_of "$DIGEST" > "$O/digest-ctrl"

fio_cmd() {   # fio_cmd SHAPE JSON_OUT
    disk=$DEV engine="--ioengine=psync" n=$NIOS size=64m
    base=$1
    case $base in
        digest-*) disk=$DIGEST base=${base#digest-} ;;
        # Each job on its own CPU: nvme-tcp maps a CPU to an I/O queue, so both
        # queues get work; iodepth 8 keeps several commands (tags) in flight on each.
        # 2×NIOS I/Os a job: blk-mq cycles through 16 tags a queue here, and a command
        # id (4-bit generation + tag) only comes back after 16 uses of its tag.
        # Each job in its own 64 MiB (offset_increment), and fio's random map never
        # repeats a block within a job's pass: no two commands in flight write the same
        # sector. (Same-sector commands in flight: the hot- shape.)
        qd8-*) base=${base#qd8-} n=$((NIOS * 2))
               engine="--ioengine=libaio --iodepth=8 --numjobs=2 --cpus_allowed=0-1 --cpus_allowed_policy=split --offset_increment=64m" ;;
        # 2 jobs at QD8 over 8 blocks of 128 KiB: commands to the same sector in flight
        # at once, all the time.
        hot-*) base=${base#hot-} n=$NIOS
               engine="--ioengine=libaio --iodepth=8 --numjobs=2 --cpus_allowed=0-1 --cpus_allowed_policy=split --norandommap --io_size=1g" size=1m ;;
    esac
    case $base in
        randread-4k) rw=randread bs=4k ;;
        randwrite-4k) rw=randwrite bs=4k ;;
        write-128k) rw=write bs=128k ;;
        randwrite-128k) rw=randwrite bs=128k ;;
        *) echo "unknown shape $1" >&2; exit 1 ;;
    esac
    echo fio --name="$1" --filename="$disk" --direct=1 $engine --rw=$rw --bs=$bs \
        --number_ios="$n" --size=$size --randrepeat=0 --output-format=json --output="$2"
}

shift $(($# < 2 ? $# : 2))
if [ $# -gt 0 ]; then
    SHAPES="$*"
else
    OVERFLOW=1
    SHAPES="randread-4k randwrite-4k write-128k qd8-randread-4k qd8-randwrite-4k qd8-randwrite-128k"
    [ -z "$DIGEST" ] || SHAPES="$SHAPES digest-randread-4k digest-randwrite-4k digest-write-128k"
fi
printf '%s\n' $SHAPES > "$O/shapes"
for shape in $SHAPES; do
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
    case $shape in
    qd8-*)
        echo "nvme-tcp: $shape: joint record, --threads 2"
        # shellcheck disable=SC2046
        "$BIN" record --profile nvme-tcp --threads 2 -o "$O/$shape-joint2.csv" -- \
            $(fio_cmd "$shape" "$O/fio-$shape-joint2.json") 2> "$O/$shape-joint2.err" \
            || { cat "$O/$shape-joint2.err"; exit 1; }
        cat "$O/$shape-joint2.err"
        continue ;;
    digest-*|hot-*) continue ;;
    esac

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

# Sustained overflow: one-page rings under random reads at depth 32 from two jobs (one
# per CPU, so both queues), so that command ids come back while samples go missing. The
# host test checks that no `ok` row is slower than fio's slowest I/O on either side.
if [ "${OVERFLOW:-0}" = 1 ]; then
    echo "nvme-tcp: record --mmap-pages 1 (overflow)"
    "$BIN" record --profile nvme-tcp --mmap-pages 1 -o "$O/overflow.csv" -- \
        fio --name=overflow --filename="$DEV" --direct=1 --ioengine=libaio --iodepth=32 \
        --numjobs=2 --cpus_allowed=0-1 --cpus_allowed_policy=split --offset_increment=64m \
        --rw=randread --bs=4k --number_ios=$((NIOS * 5)) --size=64m --randrepeat=0 \
        --output-format=json --output="$O/fio-overflow.json" \
        2> "$O/overflow.err" || { cat "$O/overflow.err"; exit 1; }
    cat "$O/overflow.err"
fi
echo "nvme-tcp: done"
