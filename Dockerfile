# syntax=docker/dockerfile:1
# The Trainguard image: `docker build -t trainguard:0.1.0 .` (or podman/buildah bud). docs/image.md.
# Hosts without a container runtime or a registry build the same image from Debian packages with
# hack/build-image.sh (an OCI layout; same venv path, user and entrypoint).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# ---- build: the locked dependencies (hash-checked wheels only: nothing is compiled) and our wheel
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY requirements.lock ./
RUN python -m venv /opt/trainguard \
 && /opt/trainguard/bin/pip install --require-hashes --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN /opt/trainguard/bin/pip wheel --no-deps -w /wheels . \
 && /opt/trainguard/bin/pip install --no-deps /wheels/trainguard-*.whl \
 && /opt/trainguard/bin/pip uninstall -y pip setuptools

# ---- runtime: the slim base, the venv, a non-root user; no compiler, no build tools
FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 trainguard \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/trainguard --create-home \
      --shell /usr/sbin/nologin trainguard
COPY --from=build /opt/trainguard /opt/trainguard
ENV PATH=/opt/trainguard/bin:$PATH PYTHONDONTWRITEBYTECODE=1 TRAINGUARD_HOME=/var/lib/trainguard
USER 10001:10001
WORKDIR /var/lib/trainguard
ENTRYPOINT ["/opt/trainguard/bin/trainguard"]
CMD ["operator"]
