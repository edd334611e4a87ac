# syntax=docker/dockerfile:1
# The Squall operator image: nimbus as a kopf operator (`squall operator`). Build from the
# repository root:
#   docker build -t squall-operator .
# Multi-stage: the build stage makes a virtualenv, the runtime stage copies only that. Runs as a
# non-root user and needs no writable root filesystem (the chart mounts an emptyDir on /tmp).

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY worker_image/squall worker_image/squall
COPY operator/squall_operator operator/squall_operator
RUN python -m venv /opt/squall \
    && /opt/squall/bin/pip install --upgrade "pip>=24" \
    && /opt/squall/bin/pip install . "kopf>=1.37,<2" "kubernetes>=30"

FROM python:3.11-slim-bookworm AS runtime
RUN groupadd --system --gid 10001 squall \
    && useradd --system --uid 10001 --gid squall --home-dir /home/squall --create-home squall
COPY --from=build /opt/squall /opt/squall
ENV PATH=/opt/squall/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /home/squall
# topologies' component modules are layered under /app; the operator imports them to validate
ENV PYTHONPATH=/app
ENTRYPOINT ["squall"]
CMD ["operator"]
