#!/usr/bin/env bash
# Install what building, running and testing ntprof-perf needs on Debian 12 (as root).
# Idempotent: installs only what is missing. Rust itself is expected (rustup / Debian).
set -euo pipefail
pkgs=(fio util-linux kmod
      # tests/spreadsheet.rs: the CSV as LibreOffice Calc imports it
      libreoffice-calc
      # tests/parquet.rs: DuckDB (a Python package, installed below) reads the Parquet
      python3 python3-pip
      # tests/plot.rs: render the SVGs of `plot` as a viewer would
      librsvg2-bin
      # the VM rig (tests/vm); kernel_change/check.sh installs the sources it checks
      qemu-system-x86 busybox-static linux-source-6.1 rsync dmsetup
      # tests/perf_record.rs: stock perf runs the command line `list --perf-record` prints
      linux-perf
      # tests/serve.rs: a real Prometheus server scrapes `serve`
      prometheus
      build-essential flex bison bc libelf-dev libssl-dev cpio xz-utils)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
    echo "deps: cargo not found; install Rust (https://rustup.rs or apt-get install cargo)" >&2
    exit 1
fi
# Debian packages no DuckDB; pip refuses the system Python unless told it may.
if ! python3 -c 'import duckdb' 2>/dev/null; then
    echo "deps: installing the duckdb Python package"
    python3 -m pip install --quiet duckdb 2>/dev/null ||
        python3 -m pip install --quiet --break-system-packages duckdb
fi
# tracefs is where event formats live; some machines boot without it mounted.
if [ ! -d /sys/kernel/tracing/events ] && [ ! -d /sys/kernel/debug/tracing/events ]; then
    mount -t tracefs nodev /sys/kernel/tracing
fi
