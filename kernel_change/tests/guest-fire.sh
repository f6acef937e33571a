#!/bin/sh
# Guest script for tests/vm/run.sh --patches (runs in the VM, chroot /host, as root):
#
#   tests/vm/run.sh --patches kernel_change/tests/guest-fire.sh OUTDIR
#
# With the nvme_tcp, nvmet_tcp, nvme and nvmet events enabled and
# trace_clock=mono (so trace timestamps and recv_time are on the same clock),
# runs small fio jobs on $NTPROF_DEV (4k randread, 4k write = in-capsule data,
# 128k write = R2T + H2CData) and saves for each job OUTDIR/trace-<job>.txt.
# Also copies the format/id files of the nvme_tcp and nvmet_tcp events into
# OUTDIR/tracefs/<uname -r>/events/<system>/<event>/.
# The checks are done on the host: kernel_change/tests/check-trace.py OUTDIR
# (kernel_change/tests/run-vm-check.sh does both).
set -eu
T=/sys/kernel/tracing
OUT=${NTPROF_OUT:?}
DEV=${NTPROF_DEV:-/dev/nvme0n1}
COUNT=${KC_FIRE_COUNT:-32}

for s in nvme_tcp nvmet_tcp; do
    [ -d $T/events/$s ] || { echo "guest-fire: no events/$s: kernel not patched?" >&2; exit 1; }
done

REL=$(uname -r)
for s in nvme_tcp nvmet_tcp; do
    for ev in $T/events/$s/*/; do
        ev=${ev%/}; name=${ev##*/}
        [ -f "$ev/format" ] || continue
        mkdir -p "$OUT/tracefs/$REL/events/$s/$name"
        cat "$ev/format" > "$OUT/tracefs/$REL/events/$s/$name/format"
        cat "$ev/id" > "$OUT/tracefs/$REL/events/$s/$name/id"
    done
done
echo "$REL" > "$OUT/uname-r"
uname -a > "$OUT/uname-a"
cat /proc/cpuinfo | grep -c ^processor > "$OUT/ncpu"

echo 0 > $T/tracing_on
echo mono > $T/trace_clock
echo 8192 > $T/buffer_size_kb
echo > $T/set_event
for s in nvme_tcp nvmet_tcp nvme nvmet; do echo 1 > $T/events/$s/enable; done

run() {   # run NAME fio-args...
    name=$1; shift
    echo > $T/trace
    echo 1 > $T/tracing_on
    fio --name="$name" --filename="$DEV" --direct=1 --ioengine=psync --iodepth=1 \
        --numjobs=1 --thread --group_reporting "$@" > "$OUT/fio-$name.txt" 2>&1
    echo 0 > $T/tracing_on
    cat $T/trace > "$OUT/trace-$name.txt"
    echo "guest-fire: $name: $(grep -c 'nvme_tcp_queue_rq:' "$OUT/trace-$name.txt") queue_rq," \
         "$(grep -c 'nvmet_tcp_done_recv_pdu:' "$OUT/trace-$name.txt") done_recv_pdu," \
         "$(grep -c . "$OUT/trace-$name.txt") lines"
}
run randread4k  --rw=randread --bs=4k   --size=64m --number_ios=$COUNT
run write4k     --rw=write    --bs=4k   --size=64m --number_ios=$COUNT
run write128k   --rw=write    --bs=128k --size=64m --number_ios=$COUNT
run read128k    --rw=read     --bs=128k --size=64m --number_ios=$COUNT

for s in nvme_tcp nvmet_tcp nvme nvmet; do echo 0 > $T/events/$s/enable; done
echo local > $T/trace_clock
echo "guest-fire: done"
