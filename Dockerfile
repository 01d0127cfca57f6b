# syntax=docker/dockerfile:1
# nmt-serve image: gRPC translation server for Marian/OPUS-MT models on CUDA GPUs (or CPU).
#
#   docker build -t nmt-serve .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 nmt-serve --config /opt/nmt/configs/default.yaml --metrics-host 0.0.0.0
#
# deploy/README.md explains compose (with Prometheus and Grafana) and Kubernetes.

ARG CUDA_VERSION=13.0.0
ARG UBUNTU=ubuntu24.04

# ---- build stage: the packages of scripts/setup.sh (the one package list), then cmake ----
FROM nvidia/cuda:${CUDA_VERSION}-devel-${UBUNTU} AS build
WORKDIR /src
COPY scripts/setup.sh scripts/setup.sh
# NMT_SETUP_TEST_TOOLS=0 leaves out the test-only tools (the Prometheus server). Its libraries
# (libcld2-dev for language detection, libzip-dev and libxml2-dev for documents, libgumbo-dev
# and libcmark-dev for format html and markdown among them) reach the runtime stage through
# ldd below.
RUN NMT_SETUP_TEST_TOOLS=0 bash scripts/setup.sh && rm -rf /var/lib/apt/lists/*
COPY . .
ARG CUDA_ARCHITECTURES="80;86;89;90"
RUN cmake -S . -B build -G Ninja \
      -DCMAKE_BUILD_TYPE=Release \
      -DNMT_ENABLE_CUDA=ON \
      -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
      -DNMT_BUILD_TESTS=OFF \
 && cmake --build build --target nmt-server nmt-translate nmt-loadgen
# The shared libraries the binaries load, found by ldd (no second package list to drift).
RUN mkdir -p /opt/nmt/bin \
 && cp build/bin/nmt-server build/bin/nmt-translate build/bin/nmt-loadgen /opt/nmt/bin/ \
 && bash deploy/docker/collect-runtime-libs.sh /opt/nmt/lib /opt/nmt/bin/*

# ---- runtime stage: binaries, their libraries, configs and the demo model ----
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${UBUNTU} AS runtime
RUN useradd --system --uid 10001 --home-dir /opt/nmt --shell /usr/sbin/nologin nmt
COPY --from=build /opt/nmt/bin/ /opt/nmt/bin/
COPY --from=build /opt/nmt/lib/ /opt/nmt/lib/
RUN echo /opt/nmt/lib > /etc/ld.so.conf.d/nmt.conf && ldconfig \
 && ! ldd /opt/nmt/bin/* | grep 'not found' | grep -v -E 'libcuda\.so|libnvidia-'
COPY configs/ /opt/nmt/configs/
COPY models/ /opt/nmt/models/
ENV PATH=/opt/nmt/bin:${PATH}
WORKDIR /opt/nmt
USER nmt
# gRPC (TranslationService, grpc.health.v1.Health) and Prometheus /metrics. The metrics
# listener binds 127.0.0.1 in configs/default.yaml: pass --metrics-host 0.0.0.0 to scrape it
# from outside the container (compose and Kubernetes do).
EXPOSE 50051 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["nmt-loadgen", "--health-check", "--target", "127.0.0.1:50051"]
ENTRYPOINT ["nmt-server"]
CMD ["--config", "/opt/nmt/configs/default.yaml"]
