#!/usr/bin/env bash
# kernel_change/check.sh [6.1|6.12|all]   (default: all)
#
# For each kernel generation: extract the Debian source
# (/usr/src/linux-source-<ver>.tar.xz) into a cache dir, restore the files the
# series touches to pristine, run apply.sh (twice: the second run must report
# "already applied"), configure a minimal tree (tinyconfig + tests/vm/kernel.config
# if present, else a built-in fragment, + NVMe/TCP host/target, tracing; on 6.12
# also the TLS options so the kTLS branches are compiled), and compile
#     drivers/nvme/host/tcp.o drivers/nvme/target/tcp.o block/blk-core.o
# with W=1 and KCFLAGS=-Werror.  Prints the time each step took.
#
# Env: KC_CACHE (default /var/tmp/kc-check), KC_JOBS (default 2), KC_W (default 1;
#      empty = kernel's default warning level).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
CACHE=${KC_CACHE:-/var/tmp/kc-check}
JOBS=${KC_JOBS:-2}
W=${KC_W-1}
TOUCHED="drivers/nvme/host/tcp.c drivers/nvme/target/tcp.c block/blk-core.c"
OBJS="drivers/nvme/host/tcp.o drivers/nvme/target/tcp.o block/blk-core.o"

log() { printf '[check %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

fragment() {
	if [ -f "$repo/tests/vm/kernel.config" ]; then
		cat "$repo/tests/vm/kernel.config"
	else
		for s in 64BIT SMP PCI NET INET UNIX TTY PRINTK BLOCK BLK_DEV PROC_FS SYSFS \
			 CONFIGFS_FS NVME_CORE NVME_FABRICS NVME_TCP NVME_TARGET NVME_TARGET_TCP \
			 BLK_DEV_NULL_BLK PERF_EVENTS FTRACE ENABLE_DEFAULT_TRACERS MULTIUSER; do
			echo "CONFIG_$s=y"
		done
	fi
	# always: what this check is about
	printf 'CONFIG_%s=y\n' NET INET NVME_CORE NVME_FABRICS NVME_TCP NVME_TARGET \
		NVME_TARGET_TCP FTRACE ENABLE_DEFAULT_TRACERS
	# 6.12: compile the kTLS branches too (symbols unknown to 6.1 are ignored)
	printf 'CONFIG_%s=y\n' KEYS TLS NET_HANDSHAKE NVME_TCP_TLS NVME_TARGET_TCP_TLS
}

check_one() {
	local ver=$1 t0 t
	local tarball=/usr/src/linux-source-$ver.tar.xz
	local tree=$CACHE/linux-source-$ver obj=$CACHE/obj-$ver
	if [ ! -f "$tarball" ]; then
		log "$ver: installing linux-source-$ver"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "linux-source-$ver" >/dev/null \
			|| { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "linux-source-$ver" >/dev/null; } \
			|| die "$tarball not found and apt-get install linux-source-$ver failed"
	fi
	mkdir -p "$CACHE"

	t0=$SECONDS
	if [ ! -f "$tree/.kc-extracted" ]; then
		log "$ver: extracting $tarball"
		rm -rf "$tree"
		tar -xf "$tarball" -C "$CACHE"
		[ -f "$tree/Makefile" ] || die "$tarball did not give $tree"
		mkdir -p "$tree/.kc-pristine"
		for f in $TOUCHED; do
			mkdir -p "$tree/.kc-pristine/$(dirname "$f")"
			cp -p "$tree/$f" "$tree/.kc-pristine/$f"
		done
		touch "$tree/.kc-extracted"
	fi
	# back to pristine (only files that differ, so make rebuilds only those)
	for f in $TOUCHED; do
		cmp -s "$tree/.kc-pristine/$f" "$tree/$f" || cp "$tree/.kc-pristine/$f" "$tree/$f"
	done
	rm -f "$tree/include/trace/events/nvme_tcp.h" "$tree/include/trace/events/nvmet_tcp.h"
	log "$ver: source ready ($((SECONDS - t0)) s)"

	"$here/apply.sh" "$tree" >&2 || die "$ver: apply.sh failed"
	local again
	again=$("$here/apply.sh" "$tree" 2>&1) || die "$ver: second apply.sh failed: $again"
	grep -q "already applied, nothing to do" <<<"$again" || die "$ver: apply.sh is not idempotent: $again"
	log "$ver: apply.sh applied the series; a second run said it was already applied"

	t0=$SECONDS
	mkdir -p "$obj"
	local mk=(make -C "$tree" O="$obj" -j"$JOBS")
	local frag=$obj/kc-fragment
	fragment >"$frag.new"
	if [ ! -f "$obj/.config" ] || ! cmp -s "$frag.new" "$frag"; then
		log "$ver: configuring (tinyconfig + fragment)"
		"${mk[@]}" -s tinyconfig >/dev/null
		local line
		while IFS= read -r line; do
			if [[ $line =~ ^CONFIG_([A-Za-z0-9_]+)=y$ ]]; then
				"$tree/scripts/config" --file "$obj/.config" --enable "${BASH_REMATCH[1]}"
			elif [[ $line =~ ^CONFIG_([A-Za-z0-9_]+)=\"(.*)\"$ ]]; then
				"$tree/scripts/config" --file "$obj/.config" --set-str "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
			elif [[ $line =~ ^#\ CONFIG_([A-Za-z0-9_]+)\ is\ not\ set ]]; then
				"$tree/scripts/config" --file "$obj/.config" --disable "${BASH_REMATCH[1]}"
			fi
		done <"$frag.new"
		"${mk[@]}" -s olddefconfig >/dev/null
		mv "$frag.new" "$frag"
	else
		rm -f "$frag.new"
	fi
	local s
	for s in NVME_TCP NVME_TARGET_TCP EVENT_TRACING TRACEPOINTS; do
		grep -qx "CONFIG_$s=y" "$obj/.config" || die "$ver: CONFIG_$s did not stick"
	done
	log "$ver: config ok ($((SECONDS - t0)) s); TLS: $(grep -E '^CONFIG_NVME(_TARGET)?_TCP_TLS=y' "$obj/.config" | tr '\n' ' ' || true)"

	t0=$SECONDS
	log "$ver: make ${W:+W=$W }KCFLAGS=-Werror $OBJS (log: $obj/kc-build.log)"
	if ! "${mk[@]}" ${W:+W=$W} KCFLAGS=-Werror $OBJS >"$obj/kc-build.log" 2>&1; then
		tail -n 40 "$obj/kc-build.log" >&2
		die "$ver: build failed (full log: $obj/kc-build.log)"
	fi
	if grep -nE 'warning:' "$obj/kc-build.log" >&2; then
		die "$ver: warnings in build (see above)"
	fi
	t=$((SECONDS - t0))
	for o in $OBJS; do
		[ -s "$obj/$o" ] || die "$ver: $obj/$o was not produced"
	done
	# the objects must define the tracepoints
	local n
	n=$(nm "$obj/drivers/nvme/host/tcp.o" | grep -c ' __tracepoint_nvme_tcp_' || true)
	[ "$n" = 11 ] || die "$ver: host tcp.o defines $n nvme_tcp tracepoints, expected 11"
	n=$(nm "$obj/drivers/nvme/target/tcp.o" | grep -c ' __tracepoint_nvmet_tcp_' || true)
	[ "$n" = 13 ] || die "$ver: target tcp.o defines $n nvmet_tcp tracepoints, expected 13"
	log "$ver: OK - compiled without warnings in $t s (11 nvme_tcp + 13 nvmet_tcp tracepoints)"
	echo "$ver: OK build ${t}s"
}

case ${1:-all} in
	6.1|6.12) check_one "$1" ;;
	all) check_one 6.1; check_one 6.12 ;;
	*) echo "usage: $0 [6.1|6.12|all]" >&2; exit 2 ;;
esac
