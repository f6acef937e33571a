#!/bin/sh
# Guest script for tests/vm_nvme.rs (run by tests/vm/run.sh inside `chroot /host`):
# runs fio shapes with a known number of I/Os on the NVMe/TCP disk under
# `ntprof-perf record|stat --profile nvme|nvmet`, and `report` on every CSV; then, when
# the rig has the emulated PCIe controller, the nvme profile on its disk (reads, writes,
# writes each followed by fsync = a flush) and the selection flags with both busy.
#   nvme-profiles.sh NTPROF_PERF_BIN [NIOS]
# Writes to $NTPROF_OUT/nvme-profiles/:
#   list.txt                          ntprof-perf list
#   <profile>-<shape>.csv, .err       record output and its stderr (health line)
#   <profile>-<shape>.report          ntprof-perf report of the CSV
#   stat-<profile>-<shape>.txt, .err  ntprof-perf stat --interval 0 output
#   fio-<profile>-<shape>.json        fio's own account of the I/Os (total_ios)
#   lba_size                          the namespace's logical block size
#   ctrl                              host controller instance, its cntlid, its disk
#   nvme-sel, nvme-nsid2, nvme-qid1, nvme-admin, nvmet-sel .csv/.err/fio-*.json:
#                                     random reads under the selection flags
#   pcie                              PCIe controller instance, disk, nsid, lba size
#   pcie-<shape>.csv, .err, .report   record --profile nvme on the PCIe disk
#   fio-pcie-<shape>.json
#   overflow-<profile>.csv, .err      record --mmap-pages 1 under libaio reads at depth 32
#   fio-overflow-<profile>.json       (two jobs): sustained ring overflow
#   both-<sel>.csv, .err              random reads on both disks at once (one fio per
#   fio-both-{fabrics,pcie}.json      disk), recorded by five recorders at once:
#                                     all, ctrl-pcie, ctrl-fabrics, nsid-pcie, nsid-fabrics
# Exits non-zero on the first command that fails; the host test checks the content.
set -eu
BIN=${1:?usage: nvme-profiles.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
DEV=${NTPROF_FABRICS_DISK:-${NTPROF_DEV:?no NVMe/TCP disk in the environment}}
PCIE=${NTPROF_PCIE_DISK:-}
O=$NTPROF_OUT/nvme-profiles
SIZE=64m
rm -rf "$O"; mkdir -p "$O"
echo "nvme-profiles: kernel $(uname -r), $DEV, $(nproc) cpus, $NIOS I/Os per run, bin $BIN"
cat "/sys/block/${DEV##*/}/queue/logical_block_size" > "$O/lba_size"
"$BIN" list > "$O/list.txt" 2>&1

# psync + direct: one synchronous request per I/O, so fio issues exactly NIOS.
fio_cmd() {   # fio_cmd SHAPE JSON_OUT [DISK]
    extra=
    case $1 in
        randread-4k) rw=randread bs=4k ;;
        randwrite-4k) rw=randwrite bs=4k ;;
        write-128k) rw=write bs=128k ;;
        # fsync on a block device is one flush command when the disk has a volatile
        # write cache (QEMU's nvme says so); fio skips the fsync after its last write.
        write-4k-fsync) rw=write bs=4k extra=--fsync=1 ;;
        *) echo "unknown shape $1" >&2; exit 1 ;;
    esac
    echo fio --name="$1" --filename="${3:-$DEV}" --direct=1 --ioengine=psync --rw=$rw --bs=$bs \
        --number_ios="$NIOS" --size=$SIZE --randrepeat=0 --output-format=json --output="$2" $extra
}

for shape in randread-4k randwrite-4k write-128k; do
    for p in nvme nvmet; do
        echo "nvme-profiles: record --profile $p, $shape"
        # shellcheck disable=SC2046 # fio_cmd prints plain words, split on purpose
        "$BIN" record --profile "$p" -o "$O/$p-$shape.csv" -- \
            $(fio_cmd "$shape" "$O/fio-$p-$shape.json") 2> "$O/$p-$shape.err" \
            || { cat "$O/$p-$shape.err"; exit 1; }
        cat "$O/$p-$shape.err"
        "$BIN" report "$O/$p-$shape.csv" > "$O/$p-$shape.report" 2>&1 \
            || { cat "$O/$p-$shape.report"; exit 1; }
        echo "nvme-profiles: stat --profile $p, $shape"
        # shellcheck disable=SC2046
        "$BIN" stat --profile "$p" --interval 0 -- \
            $(fio_cmd "$shape" "$O/fio-stat-$p-$shape.json") \
            > "$O/stat-$p-$shape.txt" 2> "$O/stat-$p-$shape.err" \
            || { cat "$O/stat-$p-$shape.err"; exit 1; }
        cat "$O/stat-$p-$shape.txt"
    done
done
# Selection flags, applied as kernel filters: the same random reads through them.
#   nvme-sel:   --ctrl <instance> --nsid 1     every read
#   nvme-nsid2: --nsid 2                       nothing (and no unmatched completions)
#   nvme-qid1:  --qid 1                        only the reads fio issued on queue 1
#   nvme-admin: --admin                        every read, plus admin commands on qid 0
#   nvmet-sel:  --ctrl <cntlid> --nsid 1       every read, on the target
name=${DEV##*/}; inst=${name#nvme}; inst=${inst%%n*}
cntlid=$(cat "/sys/class/nvme/nvme$inst/cntlid")
echo "$inst $cntlid $name" > "$O/ctrl"
sel() {   # sel NAME PROFILE FLAGS...
    n=$1 p=$2; shift 2
    echo "nvme-profiles: record --profile $p $* ($n)"
    # shellcheck disable=SC2046
    "$BIN" record --profile "$p" "$@" -o "$O/$n.csv" -- \
        $(fio_cmd randread-4k "$O/fio-$n.json") 2> "$O/$n.err" || { cat "$O/$n.err"; exit 1; }
    cat "$O/$n.err"
}
sel nvme-sel nvme --ctrl "$inst" --nsid 1
sel nvme-nsid2 nvme --nsid 2
sel nvme-qid1 nvme --qid 1
sel nvme-admin nvme --admin
sel nvmet-sel nvmet --ctrl "$cntlid" --nsid 1

# Sustained overflow: one-page rings under random reads at depth 32 from two jobs, so
# command ids come back while samples go missing. The host test checks that no `ok` row
# is slower than fio's slowest I/O, and what was lost and cut.
for p in nvme nvmet; do
    echo "nvme-profiles: record --profile $p --mmap-pages 1 (overflow)"
    "$BIN" record --profile "$p" --mmap-pages 1 -o "$O/overflow-$p.csv" -- \
        fio --name=overflow --filename="$DEV" --direct=1 --ioengine=libaio --iodepth=32 \
        --numjobs=2 --rw=randread --bs=4k --number_ios=$((NIOS * 10)) --size=$SIZE \
        --randrepeat=0 --output-format=json --output="$O/fio-overflow-$p.json" \
        2> "$O/overflow-$p.err" || { cat "$O/overflow-$p.err"; exit 1; }
    cat "$O/overflow-$p.err"
done

if [ -z "$PCIE" ]; then
    echo "nvme-profiles: no PCIe NVMe controller in this rig (NTPROF_VM_PCIE=0)"
    echo "nvme-profiles: done"
    exit 0
fi
pname=${PCIE##*/}; pinst=${pname#nvme}; pinst=${pinst%%n*}
pnsid=$(cat "/sys/block/$pname/nsid" 2>/dev/null || cat "/sys/block/$pname/device/nsid")
echo "$pinst $pname $pnsid $(cat "/sys/block/$pname/queue/logical_block_size")" > "$O/pcie"
echo "nvme-profiles: PCIe controller nvme$pinst, $PCIE (nsid $pnsid)"
for shape in randread-4k randwrite-4k write-128k write-4k-fsync; do
    echo "nvme-profiles: record --profile nvme, PCIe, $shape"
    # shellcheck disable=SC2046
    "$BIN" record --profile nvme -o "$O/pcie-$shape.csv" -- \
        $(fio_cmd "$shape" "$O/fio-pcie-$shape.json" "$PCIE") 2> "$O/pcie-$shape.err" \
        || { cat "$O/pcie-$shape.err"; exit 1; }
    cat "$O/pcie-$shape.err"
    "$BIN" report "$O/pcie-$shape.csv" > "$O/pcie-$shape.report" 2>&1 \
        || { cat "$O/pcie-$shape.report"; exit 1; }
done

# Both controllers busy at once, the same I/Os seen through each selection by its own
# recorder (each has its own rings), so one fio run serves every flag.
rec_bg() {   # rec_bg NAME FLAGS...: a background recorder of the nvme profile
    n=$1; shift
    "$BIN" record --profile nvme "$@" -o "$O/both-$n.csv" 2> "$O/both-$n.err" &
    echo $! > "$O/both-$n.pid"
}
rec_bg ctrl-pcie --ctrl "$pinst"
rec_bg ctrl-fabrics --ctrl "$inst"
rec_bg nsid-pcie --nsid "$pnsid"
rec_bg nsid-fabrics --nsid 1
sleep 3
for n in ctrl-pcie ctrl-fabrics nsid-pcie nsid-fabrics; do
    kill -0 "$(cat "$O/both-$n.pid")" || { cat "$O/both-$n.err"; exit 1; }
done
echo "nvme-profiles: random reads on $DEV and $PCIE at once, five recorders"
"$BIN" record --profile nvme -o "$O/both-all.csv" -- /bin/sh -c "
    $(fio_cmd randread-4k "$O/fio-both-fabrics.json") & a=\$!
    $(fio_cmd randread-4k "$O/fio-both-pcie.json" "$PCIE") & b=\$!
    wait \$a; ra=\$?; wait \$b; [ \$ra = 0 ] && [ \$? = 0 ]" 2> "$O/both-all.err" \
    || { cat "$O/both-all.err"; exit 1; }
sleep 1
for n in ctrl-pcie ctrl-fabrics nsid-pcie nsid-fabrics; do
    kill -INT "$(cat "$O/both-$n.pid")"
done
for n in ctrl-pcie ctrl-fabrics nsid-pcie nsid-fabrics; do
    wait "$(cat "$O/both-$n.pid")" || { cat "$O/both-$n.err"; exit 1; }
done
cat "$O"/both-*.err
echo "nvme-profiles: done"
