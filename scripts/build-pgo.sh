#!/usr/bin/env bash
# A profile-guided (PGO) release build of ntprof-perf: the reader's per-event code laid
# out and inlined by what a real run executes (measured in docs/performance.md: about a
# tenth less CPU per event, more for block). Three steps:
#   1. an instrumented build (target/pgo-gen);
#   2. training: examples/pgo_train (block and nvme-tcp replays through the profiles'
#      own plans, into CSV, Parquet and stat's table), then, as root on a host with
#      tracefs, `record` and `stat` on a loop device under fio (the live loop);
#   3. the build, with the merged profile (target/pgo/release/ntprof-perf).
# Usage: scripts/build-pgo.sh [--install PREFIX] [--bench]
#   --install PREFIX  copy the binary to PREFIX/bin (e.g. /usr/local)
#   --bench           also build the pipeline bench with the profile (target/pgo)
# NTPROF_PGO_STRICT=1 (scripts/test.sh): a step that would fall back fails instead.
# Needs llvm-profdata of rustc's LLVM: rustup's llvm-tools (added here if missing), or
# Debian's llvm-N of the same major version. Without one, or when training fails, it
# says so and makes an ordinary release build instead: the result works either way.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
prefix= bench=
while [ $# -gt 0 ]; do
    case $1 in
        --install) prefix=${2:?--install needs a PREFIX}; shift 2 ;;
        --bench) bench=1; shift ;;
        *) echo "build-pgo: unknown argument $1 (see the head of $0)" >&2; exit 2 ;;
    esac
done
root=$PWD/target/pgo-data
out=target/pgo

plain() {
    if [ "${NTPROF_PGO_STRICT:-0}" = 1 ]; then
        echo "build-pgo: $1 (NTPROF_PGO_STRICT=1: failing instead of building without a profile)" >&2
        exit 1
    fi
    echo "build-pgo: $1; building without a profile" >&2
    cargo build --release --target-dir "$out" --bin ntprof-perf ${bench:+--benches}
    finish
}
finish() {
    if [ -n "$prefix" ]; then
        install -D -m 755 "$out/release/ntprof-perf" "$prefix/bin/ntprof-perf"
        echo "build-pgo: installed $prefix/bin/ntprof-perf"
    else
        echo "build-pgo: $out/release/ntprof-perf"
    fi
    exit 0
}

# llvm-profdata must read the raw profiles of rustc's own LLVM.
host=$(rustc -vV | sed -n 's/^host: //p')
major=$(rustc -vV | sed -n 's/^LLVM version: \([0-9]*\).*/\1/p')
tools="$(rustc --print sysroot)/lib/rustlib/$host/bin"
profdata=$tools/llvm-profdata
if [ ! -x "$profdata" ] && command -v rustup >/dev/null; then
    # Bounded: a host that cannot reach rustup's server falls through to Debian's.
    timeout 300 rustup component add llvm-tools >/dev/null 2>&1 || true
fi
if [ ! -x "$profdata" ]; then
    profdata=$(command -v "llvm-profdata-$major" || true)
    if [ -z "$profdata" ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get install -y -qq --no-install-recommends "llvm-$major" >/dev/null 2>&1 ||
            { apt-get update -qq && apt-get install -y -qq --no-install-recommends \
                "llvm-$major" >/dev/null 2>&1; } || true
        profdata=$(command -v "llvm-profdata-$major" || true)
    fi
fi
[ -n "$profdata" ] && [ -x "$profdata" ] ||
    plain "no llvm-profdata for LLVM $major (rustup component add llvm-tools, or Debian's llvm-$major)"

rm -rf "$root"
mkdir -p "$root/raw"
# Build scripts run instrumented too: their profiles are written where they run and
# never reach $root/raw (set per training step below).
RUSTFLAGS="-Cprofile-generate=$root/build" \
    cargo build --release --target-dir target/pgo-gen --bin ntprof-perf --example pgo_train
gen=target/pgo-gen/release
export LLVM_PROFILE_FILE="$root/raw/%p-%m.profraw"
"$gen/examples/pgo_train" || plain "the offline training failed"

untrained() {  # untrained WHAT ERRFILE [WHY]
    echo "build-pgo: ${3:-the $1 run failed}; its code is left untrained" >&2
    [ -z "$2" ] || sed 's/^/  /' "$2" >&2
    if [ "${NTPROF_PGO_STRICT:-0}" = 1 ]; then exit 1; fi
}
# The live loop, on a real device: ring reads, the kernel's counts, the sinks as a run
# uses them. Only as root with tracefs and fio; without them that code gets no profile
# data and is compiled as in an ordinary build.
tracefs=/sys/kernel/tracing
[ -d "$tracefs/events" ] || tracefs=/sys/kernel/debug/tracing
if [ "$(id -u)" = 0 ] && [ -d "$tracefs/events/block" ] && command -v fio >/dev/null; then
    dir=$(mktemp -d)
    dev=
    cleanup() {
        [ -z "$dev" ] || losetup -d "$dev" || true
        umount "$dir" 2>/dev/null || true
        rm -rf "$dir"
    }
    trap cleanup EXIT
    mount -t tmpfs -o size=600m tmpfs "$dir"
    truncate -s 512M "$dir/img"
    dev=$(losetup -f --show "$dir/img")
    io() {  # mixed sizes, reads and writes, as a storage test would run
        fio --name=train --filename="$dev" --direct=1 --ioengine=libaio --iodepth=16 \
            --rw=randrw --bsrange=4k-64k --time_based --runtime="$1" >/dev/null
    }
    "$gen/ntprof-perf" record --device "$dev" -o "$dir/rows.csv" -o "$dir/rows.parquet" \
        -- sh -c "$(declare -f io); dev=$dev; io 4" >/dev/null 2>"$dir/err" ||
        untrained record "$dir/err"
    "$gen/ntprof-perf" stat --device "$dev" --interval 1 -- sh -c "$(declare -f io); dev=$dev; io 3" \
        >/dev/null 2>"$dir/err" || untrained stat "$dir/err"
    cleanup
    trap - EXIT
else
    untrained live "" "no live run (it needs root, tracefs and fio)"
fi
unset LLVM_PROFILE_FILE

# --sparse: what training never ran (bio, nvme, nvmet, --threads 2, serve) has no
# profile data, and is compiled as an ordinary build compiles it, not as cold code.
"$profdata" merge --sparse -o "$root/merged.profdata" "$root"/raw/*.profraw
RUSTFLAGS="-Cprofile-use=$root/merged.profdata -Cllvm-args=-pgo-warn-missing-function=false" \
    cargo build --release --target-dir "$out" --bin ntprof-perf ${bench:+--benches}
finish
