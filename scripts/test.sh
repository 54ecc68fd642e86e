#!/usr/bin/env bash
# The whole test suite, as the README and CI run it: installs what is missing (all of
# scripts/setup.sh: the .venv's packages, Triton, llama-cpp-python, Chromium), then runs every
# test of the workspace in release mode (the simulator's theory tests replay 10^6 customers).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo test --workspace --release
