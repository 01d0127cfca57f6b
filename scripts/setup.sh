#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages nmt-serve builds and tests with. Idempotent: apt-get
# skips what is already installed. The Dockerfile calls this same script, so there is one
# package list only.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
# ocl-icd-opencl-dev: Debian's oneDNN is built with its OpenCL GPU runtime, so its CMake
# package config requires OpenCL's headers and library (only a Recommends of libdnnl-dev).
PACKAGES=(
  build-essential cmake ninja-build pkg-config git ca-certificates
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libspdlog-dev libfmt-dev prometheus-cpp-dev libsentencepiece-dev libyaml-cpp-dev
  nlohmann-json3-dev libdnnl-dev ocl-icd-opencl-dev libgtest-dev libgmock-dev libicu-dev libmicrohttpd-dev
  libcld2-dev libzip-dev libxml2-dev libgumbo-dev libcmark-dev libgoogle-perftools-dev
  python3 python3-grpcio python3-grpc-tools python3-yaml
)
# Test-only tools (a real Prometheus for the metrics tests, clang + its runtimes for the
# fuzzers, openssl for the TLS test certificates, curl for the HTTP API test, pip to build
# the Python client's wheel, python3-sentencepiece to train the small SentencePiece models of
# the fairseq-family tokenizer tests (tests/model/tokenizer), python3-docx and python3-odf to
# make and read the documents the /translate_file tests upload, LibreOffice's headless
# Impress to convert their .odp to the .pptx (python-pptx is not in Debian 12; 54 packages,
# ~80 MB, about 35 s), chromium for the web page); skipped in the Docker image.
if [ "${NMT_SETUP_TEST_TOOLS:-1}" = "1" ]; then
  PACKAGES+=(prometheus clang libclang-rt-14-dev openssl curl python3-pip python3-setuptools
             python3-wheel python3-sentencepiece python3-docx python3-odf libreoffice-impress-nogui)
  # The web page's browser test (tests/browser): Debian's chromium under playwright-core.
  # Node.js and npm come with the machine.
  PACKAGES+=(chromium)
fi
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all ${#PACKAGES[@]} packages present"
