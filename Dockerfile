# flockd container: build with the Rust toolchain, run on slim Debian as a numeric non-root user.
#   docker build -t flockd .
#   docker run -p 6390:6390 -p 9390:9390 -v flockd-data:/data -e FLOCKD_REQUIREPASS=secret flockd
# The image reads /etc/flockd/flockd.toml (config/container.toml: listen on every interface,
# data in /data, JSON logs, metrics on 9390). FLOCKD_* variables override it key by key; mount
# your own file over it to change several.
# Where the public image registry cannot be reached, pass local base images (tests/container/
# run.sh makes them with debootstrap): --build-arg BUILD_IMAGE=... --build-arg RUNTIME_IMAGE=...
ARG BUILD_IMAGE=rust:1-slim-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
WORKDIR /src
# The context is what .dockerignore lets through: the workspace's manifests, crates/, src/,
# config/ and tests/faultfs (a workspace member: cargo reads every member's manifest). One COPY
# and one RUN: with a storage driver that copies every layer whole (vfs), each layer costs the
# size of the toolchain again.
COPY . .
# jemalloc (the allocator) is built from source by its -sys crate: it needs make, which the slim
# Rust image may lack. Not pinned: whatever make the base's Debian release ships will do.
# hadolint ignore=DL3008
RUN { command -v make >/dev/null || { apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*; }; } \
 && cargo build --release --locked --bin flockd

FROM ${RUNTIME_IMAGE}
# A fixed numeric user, so `USER` needs no lookup and volume ownership is predictable.
RUN groupadd --system --gid 10001 flockd \
 && useradd --system --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin flockd \
 && mkdir -p /data /etc/flockd \
 && chown 10001:10001 /data
COPY --from=build /src/target/release/flockd /usr/local/bin/flockd
COPY config/container.toml /etc/flockd/flockd.toml
# The one variable the image sets: where its configuration is.
ENV FLOCKD_CONFIG=/etc/flockd/flockd.toml
VOLUME ["/data"]
EXPOSE 6390 9390
USER 10001:10001
WORKDIR /data
# `flockd ping` reads the same file and variables (port, password) and expects +PONG.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["flockd", "ping"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["flockd"]
