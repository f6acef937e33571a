#!/bin/sh
# Guest script for tests/vm_nvme_tcp.rs `a_perf_capture_in_the_guest_imports_to_the_live_rows`
# (run by tests/vm/run.sh --patches --nullb-delay-us 1000, inside `chroot /host`): stock
# perf (the host's /usr/bin/perf) with the line `list --perf-record nvme-tcp` prints,
# and a live `ntprof-perf record --profile nvme-tcp`, watch the same fio runs; the host
# then imports the capture and compares the rows.
#   nvme-tcp-perf.sh NTPROF_PERF_BIN [NIOS]
# Writes to $NTPROF_OUT/nvme-tcp-perf/:
#   perf-line                 the printed perf record line
#   capture.data, perf.err    perf's capture and its stderr
#   live.csv, live.err        the live recording
#   fio-read.json, fio-write.json   fio's own account (NIOS 4k random reads; NIOS
#                             128k random writes, which take R2T round trips)
set -eu
BIN=${1:?usage: nvme-tcp-perf.sh NTPROF_PERF_BIN [NIOS]}
NIOS=${2:-200}
DEV=${NTPROF_FABRICS_DISK:-${NTPROF_DEV:?no NVMe/TCP disk in the environment}}
O=$NTPROF_OUT/nvme-tcp-perf
rm -rf "$O"; mkdir -p "$O"
echo "nvme-tcp-perf: kernel $(uname -r), $DEV, $(perf --version)"
line=$("$BIN" list --perf-record nvme-tcp)
echo "$line" > "$O/perf-line"
echo "nvme-tcp-perf: $line"
sh -c "exec $line -q -o $O/capture.data" 2> "$O/perf.err" &
ppid=$!
"$BIN" record --profile nvme-tcp -o "$O/live.csv" 2> "$O/live.err" &
lpid=$!
# perf -a first writes every task it finds; both have enabled their events well
# within this (TCG guest).
sleep 6
kill -0 $ppid && kill -0 $lpid || { cat "$O/perf.err" "$O/live.err"; exit 1; }
for run in read:randread:4k write:randwrite:128k; do
    name=${run%%:*} rest=${run#*:}
    fio --name="$name" --filename="$DEV" --direct=1 --ioengine=psync --rw="${rest%%:*}" \
        --bs="${rest#*:}" --number_ios="$NIOS" --size=64m --randrepeat=0 \
        --output-format=json --output="$O/fio-$name.json"
done
sleep 2
kill -INT $lpid
wait $lpid || { cat "$O/live.err"; exit 1; }
kill -INT $ppid
# perf ends on SIGINT as the signal would; its capture is checked on the host.
wait $ppid || true
cat "$O/live.err" "$O/perf.err"
ls -l "$O/capture.data"
echo "nvme-tcp-perf: done"
