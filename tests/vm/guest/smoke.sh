#!/bin/sh
# Guest smoke test (run by tests/vm/run.sh inside `chroot /host`): proves the
# NVMe/TCP path and tracing work in the VM.
#  1. tracefs: enable nvme:*, nvmet:* (and nvme_tcp:*, nvmet_tcp:* if present),
#     run fio (host binary) on $NTPROF_DEV, check that events were recorded;
#  2. perf_event_open: `perf stat -e nvme:nvme_setup_cmd ... -a -- fio ...` (host
#     perf binary), check the count is >= the number of I/Os.
# Writes $NTPROF_OUT/smoke/{trace.txt,counts.txt,perf-stat.txt,fio*.txt}.
set -u
T=/sys/kernel/tracing
O=$NTPROF_OUT/smoke
DEV=${NTPROF_DEV:?no NVMe/TCP disk in the environment (tests/vm/run.sh sets it)}
NIOS=${1:-200}
mkdir -p "$O"
fail=0
FIO="fio --name=t --filename=$DEV --direct=1 --rw=randread --bs=4k --number_ios=$NIOS --ioengine=psync --size=64m --output-format=terse"
echo "smoke: kernel $(uname -r), device $DEV ($(cat /sys/block/${DEV##*/}/size) sectors), $(nproc) cpus"

# --- 1. tracefs ring buffer
echo 0 > $T/tracing_on
echo > $T/trace
echo 4096 > $T/buffer_size_kb
systems=""
for s in nvme nvmet nvme_tcp nvmet_tcp; do
    [ -d $T/events/$s ] && { echo 1 > $T/events/$s/enable; systems="$systems $s"; }
done
echo "smoke: tracing systems:$systems"
echo 1 > $T/tracing_on
$FIO > "$O/fio-trace.txt" 2>&1 || { echo "smoke: FAIL fio (trace run)"; cat "$O/fio-trace.txt"; fail=1; }
echo 0 > $T/tracing_on
cat $T/trace > "$O/trace.txt"
for s in nvme nvmet nvme_tcp nvmet_tcp; do [ -d $T/events/$s ] && echo 0 > $T/events/$s/enable; done
grep -v '^#' "$O/trace.txt" | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[a-z_]+:$/ && $(i-1) ~ /^[0-9.]+:$/) {print $i; break}}' \
    | sort | uniq -c > "$O/counts.txt"
echo "smoke: trace event counts:"; cat "$O/counts.txt"
for ev in nvme_setup_cmd nvme_complete_rq nvmet_req_init nvmet_req_complete; do
    c=$(awk -v e="$ev:" '$2==e{print $1}' "$O/counts.txt"); c=${c:-0}
    if [ "$c" -lt "$NIOS" ]; then echo "smoke: FAIL $ev: $c events < $NIOS I/Os"; fail=1
    else echo "smoke: ok $ev: $c events"; fi
done
echo "smoke: sample trace lines:"; grep -m 6 -E 'nvme_setup_cmd|nvme_complete_rq|nvmet_req' "$O/trace.txt"

# --- 2. perf_event_open via perf stat
if command -v perf >/dev/null 2>&1; then
    perf stat -x, -o "$O/perf-stat.txt" -e nvme:nvme_setup_cmd -e nvmet:nvmet_req_complete -a -- \
        $FIO > "$O/fio-perf.txt" 2>&1
    prc=$?
    cat "$O/perf-stat.txt"
    c=$(awk -F, '$3=="nvme:nvme_setup_cmd"{print $1}' "$O/perf-stat.txt"); c=${c:-0}
    case $c in ''|*[!0-9]*) c=0 ;; esac
    if [ $prc -ne 0 ] || [ "$c" -lt "$NIOS" ]; then
        echo "smoke: FAIL perf stat (status $prc, nvme_setup_cmd=$c)"; cat "$O/fio-perf.txt"; fail=1
    else echo "smoke: ok perf stat nvme:nvme_setup_cmd=$c"; fi
else
    echo "smoke: perf not installed on the host; skipped perf stat"
fi
[ $fail = 0 ] && echo "smoke: PASS" || echo "smoke: FAIL"
exit $fail
