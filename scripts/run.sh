#!/usr/bin/env bash
# Quickstart: installs the packages, builds, and serves the embedded demo model
# (gRPC on :50051, Prometheus metrics on 127.0.0.1:9464) on the GPU if visible, else the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh -DNMT_BUILD_TESTS=OFF
exec build/bin/nmt-server --config configs/default.yaml "$@"
