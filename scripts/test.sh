#!/usr/bin/env bash
# Quickstart: installs the packages, builds everything and runs the whole test suite (ctest).
# GPU tests report SKIPPED with the reason when no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DNMT_BUILD_TESTS=ON
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" --timeout 1500
