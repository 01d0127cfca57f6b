#!/usr/bin/env bash
# Configures and builds nmt-serve into build/ (CUDA engine included when nvcc is found).
# Extra arguments go to the CMake configure step, e.g. -DNMT_ENABLE_CUDA=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
GENERATOR=()
command -v ninja >/dev/null && GENERATOR=(-G Ninja)
if [ -z "${CMAKE_CUDA_ARCHITECTURES:-}" ]; then CMAKE_CUDA_ARCHITECTURES=90; fi
cmake -S . -B "$BUILD_DIR" "${GENERATOR[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES="$CMAKE_CUDA_ARCHITECTURES" "$@"
cmake --build "$BUILD_DIR" -j "$(nproc)"
