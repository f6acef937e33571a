#!/usr/bin/env bash
# kernel_change/tests/run-vm-check.sh [OUTDIR]
#
# Boots the patched 6.1 test VM (tests/vm/run.sh --patches), runs guest-fire.sh
# in it, checks the traces on the host with check-trace.py (report also in
# OUTDIR/check-report.txt) and copies the captured nvme_tcp / nvmet_tcp
# format+id files to <repo>/tracefs/<guest uname -r>/events/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
OUT=${1:-/var/tmp/kc-vm-out}
rm -rf "$OUT"; mkdir -p "$OUT"
"$repo/tests/vm/run.sh" --patches --timeout "${KC_VM_TIMEOUT:-900}" "$here/guest-fire.sh" "$OUT"
rel=$(cat "$OUT/uname-r")
for s in nvme_tcp nvmet_tcp; do
    dst=$repo/tracefs/$rel/events/$s
    rm -rf "$dst"; mkdir -p "$dst"
    cp -r "$OUT/tracefs/$rel/events/$s/." "$dst/"
    echo "tracefs/$rel/events/$s: $(ls "$dst" | wc -l) events"
done
set +e
python3 "$here/check-trace.py" "$OUT" | tee "$OUT/check-report.txt"
rc=${PIPESTATUS[0]}
exit "$rc"
