# The loadwise operator image: non-root (uid 10001), runs on a read-only root filesystem, the
# `loadwise` console script as entrypoint and `run` as its command.
#
#   docker build -t loadwise .   # on the public Python base below
#   make image                   # without a Docker engine: hack/build-image builds a Debian
#                                # bookworm base with mmdebstrap and passes it as BASE (podman)
#
# BASE: any Debian-like image with python3 >= 3.11, its venv module, groupadd and useradd.
# GO_BASE: where the device allocator (hack/dra-allocator, kube-scheduler's DRA allocator that
# loadwise runs beside itself) is built, with Go >= 1.26; hack/build-image builds it on the host
# instead (hack/ensure-tools) and puts it in build/dra-allocator, which this build then copies.
ARG BASE=python:3.11-slim
ARG GO_BASE=golang:1.26-bookworm

FROM ${GO_BASE} AS allocator
WORKDIR /src
# go.mod always matches, so the copy works whether or not a prebuilt binary is in build/.
COPY hack/dra-allocator/go.mod build/dra-allocator* /prebuilt/
COPY hack/dra-allocator/ ./
RUN if [ -x /prebuilt/dra-allocator ]; then cp /prebuilt/dra-allocator /dra-allocator; \
    else CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /dra-allocator .; fi

FROM ${BASE} AS build
# A CA bundle file for pip, for builds behind a TLS-intercepting proxy (hack/build-image mounts
# the host's bundle there); empty: pip's own.
ARG PIP_CERT=
WORKDIR /src
# A virtualenv, not the system site-packages: Debian's python3 has no pip, and one directory
# is all the runtime stage copies.
RUN python3 -m venv /opt/loadwise
# The dependencies (and the build backend) first, in a layer of their own that only a change to
# the lock rebuilds; a code change rebuilds only the last step. requirements.lock pins every
# one with its hashes (make lock), so every build installs the same files. The
# build-isolation-free install keeps the last step off the network. pip reads PIP_CERT from the
# environment; an empty one would be read as a path.
COPY requirements.lock ./
RUN if [ -n "$PIP_CERT" ]; then export PIP_CERT; else unset PIP_CERT; fi \
 && /opt/loadwise/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
      --require-hashes --requirement requirements.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
# pip and setuptools leave the venv: nothing installs anything at run time.
RUN /opt/loadwise/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
      --no-deps --no-build-isolation /src \
 && /opt/loadwise/bin/python -m pip uninstall --yes --disable-pip-version-check pip setuptools

FROM ${BASE}
LABEL org.opencontainers.image.title="loadwise" \
      org.opencontainers.image.description="A load-aware secondary scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN groupadd --gid 10001 loadwise \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin loadwise
# Byte code was compiled by pip at install: nothing is written at run time.
COPY --from=build /opt/loadwise /opt/loadwise
COPY --from=allocator /dra-allocator /opt/loadwise/bin/dra-allocator
ENV PATH=/opt/loadwise/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# The HTTPS port (secure_port; /metrics, /healthz, /readyz): no plain HTTP port by default.
EXPOSE 10259
ENTRYPOINT ["loadwise"]
CMD ["run"]
