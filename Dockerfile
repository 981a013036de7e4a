# flockd container: build with the Rust toolchain, run on slim Debian as a non-root user.
#   docker build -t flockd .
#   docker run -p 6390:6390 -v flockd-data:/data -e FLOCKD_REQUIREPASS=secret flockd
# Every setting is a FLOCKD_* variable (see config/flockd.toml), e.g. FLOCKD_APPENDFSYNC=everysec.

FROM rust:1-slim-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY config ./config
RUN cargo build --release --locked --bin flockd

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 flockd \
 && useradd --system --uid 10001 --gid flockd --home-dir /data --shell /usr/sbin/nologin flockd \
 && mkdir -p /data /etc/flockd \
 && chown flockd:flockd /data
COPY --from=build /src/target/release/flockd /usr/local/bin/flockd
COPY config/flockd.toml /etc/flockd/flockd.toml
# Inside a container the server must listen on every interface; the data lives in the volume.
ENV FLOCKD_BIND=0.0.0.0 \
    FLOCKD_PORT=6390 \
    FLOCKD_DIR=/data \
    FLOCKD_LOG_FORMAT=json
VOLUME ["/data"]
EXPOSE 6390
USER flockd:flockd
WORKDIR /data
# `flockd ping` reads the same FLOCKD_* variables (port, password) and expects +PONG.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["flockd", "ping"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["flockd"]
