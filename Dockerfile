# brisk, CPU-only image.
#
#   docker build -t brisk .
#   docker run --rm -v ~/.cache/brisk/models:/models brisk \
#       generate --model /models/SmolLM2-135M-Instruct.Q4_1.gguf --temp 0 -n 64 --prompt "Hello"
#
# Models are not baked in: mount a folder holding them at /models
# (scripts/fetch-model.sh puts SmolLM2 in ~/.cache/brisk/models).
# The CUDA variant of this image comes with the CUDA/deployment issues.
# The build context leaves out .git (.dockerignore), so `brisk --version`
# reports commit "unknown" in this image.

ARG DEBIAN_IMAGE=debian:bookworm-20241111-slim

# ---- build stage: compilers and -dev packages, then a Release build --------
FROM ${DEBIAN_IMAGE} AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/
RUN bash scripts/install-deps.sh && rm -rf /var/lib/apt/lists/*
COPY . .
RUN bash scripts/build.sh Release -DBRISK_CUDA=OFF \
    && build/bin/brisk --version

# ---- runtime stage: the binary and its two shared libraries ---------------
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends libuv1 libcjson1 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin brisk \
    && mkdir -p /models
COPY --from=build /src/build/bin/brisk /usr/local/bin/brisk
USER brisk
VOLUME ["/models"]
ENTRYPOINT ["brisk"]
CMD ["--version"]
