#!/bin/sh
# Guest script (run by tests/vm/run.sh inside `chroot /host`): copies the tracefs
# `format` and `id` files of every event of the systems nvme, nvmet, block and,
# when present, nvme_tcp, nvmet_tcp into
#     $NTPROF_OUT/tracefs/<uname -r>/events/<system>/<event>/{format,id}
# Extra systems can be given as arguments.
set -eu
T=/sys/kernel/tracing
[ -d $T/events ] || { echo "no $T/events" >&2; exit 1; }
REL=$(uname -r)
DEST=$NTPROF_OUT/tracefs/$REL/events
n=0
for sys in nvme nvmet block nvme_tcp nvmet_tcp "$@"; do
    [ -d "$T/events/$sys" ] || { echo "capture-formats: no events/$sys (skipped)"; continue; }
    for ev in "$T/events/$sys"/*/; do
        ev=${ev%/}; name=${ev##*/}
        [ -f "$ev/format" ] || continue
        mkdir -p "$DEST/$sys/$name"
        cat "$ev/format" > "$DEST/$sys/$name/format"
        cat "$ev/id" > "$DEST/$sys/$name/id"
        n=$((n+1))
    done
    echo "capture-formats: $sys: $(ls "$T/events/$sys" | grep -v -e '^enable$' -e '^filter$' | tr '\n' ' ')"
done
echo "capture-formats: $n events captured for $REL into $DEST"
[ "$n" -gt 0 ]
