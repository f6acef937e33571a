#!/usr/bin/env bash
# Run every check and test of ntprof-perf on this machine (as root): formatting, lints,
# unit tests, integration tests on the real kernel (loop devices), and the NVMe/TCP VM
# rig (tests/vm). Kernel tests fail rather than skip here (NTPROF_REQUIRE_KERNEL=1).
# NTPROF_VM=0 leaves out the VM tests (they need a kernel build, ~5 min the first time).
# NTPROF_VM_PATCHED=1 (default here) runs the stock nvme/nvmet VM test on the kernel_change/
# kernel too, so one guest kernel is built instead of two; 0 uses a pristine kernel.
# NTPROF_VM_612=1 runs the VM tests a second time on a 6.12 guest (Debian
# linux-source-6.12 + kernel_change/): a second kernel build and boot, ≈ 11 min on 2 cores,
# which took a fresh CI run to 47 min (2026-12-02). By default (0) the 6.12 series is
# checked as kernel_change/check.sh does it instead (applied twice, the patched files
# compiled with -Werror, kTLS branches included: ≈ 40 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
./scripts/deps.sh
export NTPROF_REQUIRE_KERNEL=1
export NTPROF_VM=${NTPROF_VM:-1}
export NTPROF_VM_PATCHED=${NTPROF_VM_PATCHED:-1}
cargo fmt --all -- --check
cargo clippy --release --all-targets -- -D warnings
# The profile-guided build the README installs (demo.sh): tests/pgo.rs checks it writes
# what the ordinary build does.
NTPROF_PGO_STRICT=1 ./scripts/build-pgo.sh
export NTPROF_PGO_BIN=$PWD/target/pgo/release/ntprof-perf NTPROF_REQUIRE_PGO=1
# --profile ci: release code without fat LTO (Cargo.toml says why).
cargo test --profile ci
if [ "$NTPROF_VM" = 1 ] && [ "${NTPROF_VM_612:-0}" = 1 ]; then
    echo "test.sh: the VM tests on the 6.12 guest"
    NTPROF_VM_KSRC=/usr/src/linux-source-6.12.tar.xz \
        cargo test --profile ci --test vm_nvme --test vm_nvme_tcp --test vm_stacked
elif [ "$NTPROF_VM" = 1 ]; then
    echo "test.sh: kernel_change/ on 6.12 (applies, compiles with -Werror)"
    ./kernel_change/check.sh 6.12
fi
