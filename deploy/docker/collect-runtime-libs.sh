#!/usr/bin/env bash
# Copies the shared libraries that the given executables load into DEST, so that the runtime
# image carries exactly what the binaries need (gRPC, protobuf, spdlog, prometheus-cpp,
# sentencepiece, oneDNN, ICU, ...) without a second package list that could drift from
# scripts/setup.sh. Used by the Dockerfile's build stage; tested by tests/deploy.
#
#   deploy/docker/collect-runtime-libs.sh DEST EXECUTABLE...
#
# Skipped, because the runtime base image (nvidia/cuda:*-runtime-ubuntu24.04, same Ubuntu
# and CUDA release as the build image) already has them, or because the NVIDIA container
# toolkit injects them at run time: glibc and the C++ runtime, the CUDA runtime libraries,
# the driver (libcuda, libnvidia-*).
# Fails when a library other than the driver's cannot be resolved.
set -euo pipefail
dest=${1:?usage: collect-runtime-libs.sh DEST EXECUTABLE...}
shift
[ $# -gt 0 ] || { echo "collect-runtime-libs: no executables given" >&2; exit 2; }
skip='^(linux-vdso|ld-linux|libc\.so|libm\.so|libpthread|libdl\.so|librt\.so|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda\.so|libnvidia-|libcudart|libcublas|libcublasLt|libcurand|libcufft|libcusparse|libcusolver|libnvrtc|libnvJitLink)'
driver='^(libcuda\.so|libnvidia-)'
mkdir -p "$dest"
count=0
for exe in "$@"; do
  [ -x "$exe" ] || { echo "collect-runtime-libs: not an executable: $exe" >&2; exit 1; }
  while read -r name arrow path _; do
    [ "$arrow" = "=>" ] || continue
    if [ "$path" = "not" ]; then
      [[ "$name" =~ $driver ]] && continue
      echo "collect-runtime-libs: $exe needs $name, which is not installed" >&2
      exit 1
    fi
    [[ "$name" =~ $skip ]] && continue
    if [ ! -e "$dest/$name" ]; then
      cp -L "$path" "$dest/$name"
      count=$((count + 1))
    fi
  done < <(ldd "$exe")
done
echo "collect-runtime-libs: $count libraries copied to $dest"
