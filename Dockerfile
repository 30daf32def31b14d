# syntax=docker/dockerfile:1
#
# sandpy as an HTTP MCP server: `sandpy serve --http 0.0.0.0:8080`.
#
#   docker build -t sandpy:0.1.0 .
#   docker run --rm -p 8080:8080 --read-only --tmpfs /tmp -e SANDPY_TOKEN=$(openssl rand -hex 32) sandpy:0.1.0
#
# Two stages: the builder compiles the `sandpy` binary (crate `sandpy-cli`); the runtime
# stage is Debian slim with that binary, a non-root user (uid 10001) and the Python
# runtime already compiled to native code (`sandpy warmup`, in $SANDPY_CACHE_DIR), so a
# container serves at once and never writes to its root filesystem. What it writes goes to
# $SANDPY_SCRATCH_DIR (/tmp/sandpy: mount a tmpfs or an emptyDir on /tmp) and, if the
# config sets `sandpy.sessions.save_dir`, there. See docs/guide/service.md.

# Keep in step with the toolchain the workspace is built with (wasmtime 48.0.8 is pinned
# for rustc 1.95, see Cargo.toml). Builder and runtime share the Debian release, so the
# binary's glibc is the one it runs on.
ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
# crates/sandpy-guest/build.rs makes the guest component: it creates a venv under target/,
# `pip install`s the curated pure-Python packages from PyPI (network access needed while
# building), and runs the vendored componentize-py (vendor/componentize-py, a
# build-dependency) in process. No Node.js: that
# is only for the tests' reference MCP servers.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (.dockerignore keeps target/, .git and venvs out of the
# context). crates/sandpy-py is not built, but is a workspace member cargo must see.
COPY Cargo.toml Cargo.lock ./
COPY vendor/ vendor/
COPY guest/ guest/
COPY crates/ crates/
# target/ is a cache mount (kept between builds, not in the image), so the binary is
# copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p sandpy-cli \
 && install -D -m 0755 target/release/sandpy /out/sandpy

FROM debian:${DEBIAN_RELEASE}-slim AS runtime
# ca-certificates: https upstream MCP servers are checked against the system roots.
# tini: PID 1 that passes SIGTERM on to sandpy and reaps the processes stdio upstreams
# may leave behind.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        ca-certificates tini \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 sandpy \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin sandpy \
 && install -d -o 10001 -g 10001 -m 0755 /opt/sandpy/cache /var/lib/sandpy/sessions \
 && install -d -m 0755 /etc/sandpy
COPY --from=builder /out/sandpy /usr/local/bin/sandpy
# A default config (no upstreams, default limits); Kubernetes mounts its ConfigMap here.
COPY deploy/docker/sandpy.json /etc/sandpy/sandpy.json
# SANDPY_CACHE_DIR: the compiled runtime (.cwasm), made below and only read afterwards.
# SANDPY_SCRATCH_DIR: each run's /tmp and /output (made and removed per run); the only
# folder a run needs writable.
ENV SANDPY_CACHE_DIR=/opt/sandpy/cache \
    SANDPY_SCRATCH_DIR=/tmp/sandpy \
    SANDPY_CONFIG=/etc/sandpy/sandpy.json
USER 10001:10001
# Compile the runtime now, as the user that serves, both builds (with interruption checks
# for the server, without for one-shot `sandpy run`). The cache file is named after the
# CPU features of the machine that builds the image: on a node whose CPU differs, the
# server compiles the runtime again at start (tens of seconds of CPU, a warning that the
# read-only cache cannot keep it) and then serves normally. Build on the nodes' CPU family.
RUN sandpy warmup && ls -l /opt/sandpy/cache
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/sandpy"]
# A bind beyond loopback needs a bearer token: SANDPY_TOKEN, or tenants in the config.
CMD ["serve", "--http", "0.0.0.0:8080", "--config", "/etc/sandpy/sandpy.json"]
