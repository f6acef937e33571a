#!/bin/sh
# Apply the ntprof-perf NVMe/TCP tracepoint series to a kernel source tree.
#
#   kernel_change/apply.sh <kernel-source-dir>
#
# Detects the kernel generation from the tree's Makefile (VERSION/PATCHLEVEL),
# copies include/trace/events/{nvme_tcp,nvmet_tcp}.h into the tree and applies
# patches/<ver>/*.patch in order.  Idempotent: a series that is already applied
# is reported and left alone; a partly applied or conflicting tree is an error
# (nothing is changed in that case).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
tree=${1:-}
if [ -z "$tree" ] || [ ! -f "$tree/Makefile" ]; then
	echo "usage: $0 <kernel-source-dir>   (a tree with a top-level Makefile)" >&2
	exit 2
fi
tree=$(cd "$tree" && pwd)

mk() { sed -n "s/^$1 *= *\([0-9]*\).*/\1/p" "$tree/Makefile" | head -n1; }
version=$(mk VERSION)
patchlevel=$(mk PATCHLEVEL)
sublevel=$(mk SUBLEVEL)
ver="$version.$patchlevel"

if [ ! -d "$here/patches/$ver" ]; then
	known=$(cd "$here/patches" && ls | tr '\n' ' ')
	echo "apply.sh: kernel $ver.$sublevel in $tree is not supported (series exist for: $known)." >&2
	echo "apply.sh: port the series first, see kernel_change/README.md, 'Porting'." >&2
	exit 1
fi

for f in drivers/nvme/host/tcp.c drivers/nvme/target/tcp.c; do
	if [ ! -f "$tree/$f" ]; then
		echo "apply.sh: $tree/$f is missing; is this a full kernel tree?" >&2
		exit 1
	fi
done

echo "apply.sh: kernel $ver.$sublevel, series patches/$ver"

# 1. headers (identical for every generation)
for h in nvme_tcp.h nvmet_tcp.h; do
	src="$here/include/trace/events/$h"
	dst="$tree/include/trace/events/$h"
	if [ -f "$dst" ] && cmp -s "$src" "$dst"; then
		echo "  include/trace/events/$h: already up to date"
	else
		cp "$src" "$dst"
		echo "  include/trace/events/$h: installed"
	fi
done

# 2. patches: check every one first, then apply the ones not yet applied
pending=""
for p in "$here/patches/$ver"/*.patch; do
	name=$(basename "$p")
	if patch -d "$tree" -p1 -R --dry-run -s -f <"$p" >/dev/null 2>&1; then
		echo "  $name: already applied"
	elif patch -d "$tree" -p1 --dry-run -s -f <"$p" >/dev/null 2>&1; then
		pending="$pending $p"
	else
		echo "apply.sh: $name neither applies nor is applied to $tree:" >&2
		patch -d "$tree" -p1 --dry-run -f <"$p" >&2 || true
		exit 1
	fi
done
for p in $pending; do
	patch -d "$tree" -p1 -s -f --no-backup-if-mismatch <"$p"
	echo "  $(basename "$p"): applied"
done
[ -n "$pending" ] || echo "apply.sh: series already applied, nothing to do"
exit 0
