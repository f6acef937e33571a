#!/usr/bin/env bash
# Install ntprof-perf and profile a real block device: a loop device on tmpfs driven
# by dd. Shows `list`, `record` (CSV), `report` and `stat`. Run as root.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/deps.sh
# A profile-guided build (about a tenth less CPU per traced event; docs/performance.md);
# without llvm-profdata it says so and installs an ordinary release build.
./scripts/build-pgo.sh --install /usr/local
dir=$(mktemp -d)
mount -t tmpfs -o size=128m tmpfs "$dir"
truncate -s 64M "$dir/img"
dev=$(losetup -f --show "$dir/img")
trap 'losetup -d "$dev"; umount "$dir"; rmdir "$dir"' EXIT
echo mq-deadline > "/sys/block/${dev#/dev/}/queue/scheduler" || true
set -x
ntprof-perf list
ntprof-perf record --device "$dev" -o /tmp/ntprof-demo.csv -- \
    sh -c "dd if=/dev/zero of=$dev bs=4k count=2000 oflag=direct status=none;
           dd if=$dev of=/dev/null bs=128k count=200 iflag=direct status=none"
head -5 /tmp/ntprof-demo.csv
ntprof-perf report /tmp/ntprof-demo.csv
ntprof-perf stat --device "$dev" --interval 1 -- \
    dd if=/dev/zero of="$dev" bs=64k count=500 oflag=direct status=none
