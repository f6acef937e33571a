#!/usr/bin/env bash
# Run every check and test of ntprof-perf on this machine (as root): formatting, lints,
# unit tests, integration tests on the real kernel (loop devices), and the NVMe/TCP VM
# rig (tests/vm). Kernel tests fail rather than skip here (NTPROF_REQUIRE_KERNEL=1).
# NTPROF_VM=0 leaves out the VM tests (they need a kernel build, ~5 min the first time).
# NTPROF_VM_PATCHED=1 (default here) runs the stock nvme/nvmet VM test on the kernel_change/
# kernel too, so one guest kernel is built instead of two; 0 uses a pristine kernel.
# NTPROF_VM_612=1 (default with the VM) runs the VM tests a second time on a 6.12 guest
# (Debian linux-source-6.12 + kernel_change/); 0 leaves it out (a second kernel build).
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
cargo test --release
if [ "$NTPROF_VM" = 1 ] && [ "${NTPROF_VM_612:-1}" = 1 ]; then
    echo "test.sh: the VM tests on the 6.12 guest"
    NTPROF_VM_KSRC=/usr/src/linux-source-6.12.tar.xz \
        cargo test --release --test vm_nvme --test vm_nvme_tcp --test vm_stacked
fi
