#!/usr/bin/env bash
# Prepares the GPU device call here (that machine has no Rust): builds the release `capsim`,
# strips it into target/device/capsim (ignored by git; the call's carry), checks what the call
# carries (scripts/device/check.py: the 64 MiB limit, no registry reached), and prints the call.
#
#     scripts/device/pack.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --release --bin capsim
mkdir -p target/device
cp target/release/capsim target/device/capsim
strip target/device/capsim
# The device's glibc must be at least the newest version the binary asks for.
newest_glibc=$(objdump -T target/device/capsim 2>/dev/null | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)
echo "target/device/capsim: $(du -h target/device/capsim | cut -f1), needs ${newest_glibc:-an unknown glibc}"
python3 scripts/device/check.py
cat <<'EOF'
The device call (run tool):
  command:   bash scripts/device/run.sh
  carry:     ["target/device"]
  timeout_s: 600
Then unpack and commit its files as docs/calibration.md, "On a lent GPU machine", says.
EOF
