# syntax=docker/dockerfile:1.7
# brisk, GPU image: built with the CUDA backend for T4, A100 and H100
# (sm_75, sm_80, sm_90); runs on any host with an NVIDIA driver for CUDA 12.6+.
#
#   docker build -t brisk:cuda .
#   docker run --rm --gpus all -p 8080:8080 -v ~/.cache/brisk/models:/models:ro brisk:cuda \
#       serve --host 0.0.0.0 --device auto --model /models/SmolLM2-135M-Instruct.Q4_1.gguf
#
# The default command serves /models/model.gguf on 0.0.0.0:8080. A model is
# mounted at /models, or baked in from a named build context:
#
#   docker build -t brisk:cuda-smollm2 \
#       --build-context models=$HOME/.cache/brisk/models \
#       --build-arg MODEL_FILE=SmolLM2-135M-Instruct.Q4_1.gguf .
#
# The default command adds `--device auto`: the model runs on the GPU when one
# is visible and it fits, else on the CPU, as the start-up log says. Pass
# `--device cuda` to refuse to start without a GPU (the AKS overlay does). The
# CUDA backend has not yet run on a real GPU (README "Status").
# The CPU-only image is Dockerfile.cpu; both are described in docs/OPERATIONS.md.

ARG CUDA_VERSION=12.6.3
ARG CUDA_OS=ubuntu24.04
ARG DEBIAN_IMAGE=debian:bookworm-20241111-slim

# Models to bake in: empty unless `--build-context models=DIR` replaces it.
FROM scratch AS models

# ---- llhttp: brisk compiles llhttp's generated C sources, which Debian's
# node-llhttp ships in /usr/share/llhttp (the same package and version CI
# builds and tests with). Plain C sources, so taking them from Debian into the
# Ubuntu-based CUDA stage is safe.
FROM ${DEBIAN_IMAGE} AS llhttp
RUN apt-get update \
    && apt-get install -y --no-install-recommends node-llhttp \
    && rm -rf /var/lib/apt/lists/*

# ---- build stage: nvcc + cuBLAS headers from the CUDA devel image ----------
FROM nvidia/cuda:${CUDA_VERSION}-devel-${CUDA_OS} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential cmake pkg-config libuv1-dev libcjson-dev \
    && rm -rf /var/lib/apt/lists/*
COPY --from=llhttp /usr/share/llhttp /usr/share/llhttp
COPY --from=llhttp /usr/share/include/llhttp /usr/share/include/llhttp
WORKDIR /src
COPY . .
# No GPU is needed to build: nvcc compiles for the listed architectures, and
# --version must name all three (CMake found the toolkit and used the list).
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBRISK_CUDA=ON \
        -DBRISK_CUDA_ARCHITECTURES="75;80;90" \
    && cmake --build build -j"$(nproc)" --target brisk \
    && build/bin/brisk --version \
    && build/bin/brisk --version | grep -q 'cuda(sm_75 sm_80 sm_90'

# ---- runtime stage: the "runtime" flavour carries cuBLAS, which the CUDA
# backend links (CUDA::cublas; "base" has only cudart); plus libuv, cJSON and
# a non-root user.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-${CUDA_OS}
# bash, head and grep (Ubuntu essentials) run the HEALTHCHECK below; no curl.
RUN apt-get update \
    && apt-get install -y --no-install-recommends libuv1t64 libcjson1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin brisk \
    && mkdir -p /models
COPY --from=build /src/build/bin/brisk /usr/local/bin/brisk
ARG MODEL_FILE=
RUN --mount=type=bind,from=models,target=/mnt/models \
    if [ -n "$MODEL_FILE" ]; then install -m 0444 "/mnt/models/$MODEL_FILE" /models/model.gguf; fi
ENV BRISK_MODEL=/models/model.gguf
# The NVIDIA container runtime mounts the driver libraries when these ask it to.
ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
EXPOSE 8080
# /health is 200 once the model is loaded (503 before). BRISK_HEALTH_PORT
# follows a changed --port.
HEALTHCHECK --interval=15s --timeout=3s --start-period=300s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${BRISK_HEALTH_PORT:-8080} && printf 'GET /health HTTP/1.1\\r\\nHost: localhost\\r\\nConnection: close\\r\\n\\r\\n' >&3 && head -c 12 <&3 | grep -q '^HTTP/1.1 200$'"]
ENTRYPOINT ["brisk"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080", "--device", "auto"]
