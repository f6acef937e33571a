#!/usr/bin/env bash
# capture-tracefs.sh [--patches]
#
# Boots the test VM (run.sh), runs guest/capture-formats.sh and copies the
# captured tracefs format/id files into <repo>/tracefs/<uname -r>/events/...
# (e.g. tracefs/6.1.192/events/nvme/nvme_setup_cmd/format). With --patches the
# patched kernel is used (tracefs/<ver>-ntprof/..., incl. nvme_tcp/nvmet_tcp).
# Existing files for the same release are replaced (the whole
# tracefs/<release>/events/<system>/ directory of each captured system).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=$(mktemp -d /tmp/ntprof-capture.XXXXXX)
"$VM_DIR/run.sh" "$@" "$VM_DIR/guest/capture-formats.sh" "$OUT"
for rel in "$OUT"/tracefs/*/; do
    rel=$(basename "$rel")
    for sys in "$OUT/tracefs/$rel/events"/*/; do
        sys=$(basename "$sys")
        dst=$REPO_ROOT/tracefs/$rel/events/$sys
        rm -rf "$dst"; mkdir -p "$dst"
        cp -r "$OUT/tracefs/$rel/events/$sys/." "$dst/"
        log "tracefs/$rel/events/$sys: $(ls "$dst" | wc -l) events"
    done
done
rm -rf "$OUT"
