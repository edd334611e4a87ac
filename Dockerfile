# syntax=docker/dockerfile:1
# The Squall operator image: nimbus as a kopf operator (`squall operator`). Build from the
# repository root:
#   docker build -t squall-operator .
# Multi-stage: the deps stage makes a virtualenv with the dependencies (read from pyproject.toml
# alone, so a code change does not reinstall them), the wheel stage builds the squall package,
# and the runtime stage copies the virtualenv and installs the wheel into it: a code change
# rebuilds the wheel and one small layer. No PySpark (Squall's `spark` extra): the operator
# never runs it.
# Runs as a non-root user and needs no writable root filesystem (the chart mounts an emptyDir on
# /tmp).

FROM python:3.11-slim-bookworm AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/squall \
    && /opt/squall/bin/pip install --upgrade "pip>=24"
COPY pyproject.toml ./
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"]))' > requirements.txt \
    && /opt/squall/bin/pip install -r requirements.txt

# the squall package as a wheel, built apart so that the runtime stage adds only its files
FROM deps AS wheel
RUN /opt/squall/bin/pip install "setuptools>=77" "wheel>=0.43"
COPY README.md ./
COPY worker_image/squall worker_image/squall
COPY operator/squall_operator operator/squall_operator
RUN /opt/squall/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.11-slim-bookworm AS runtime
RUN groupadd --system --gid 10001 squall \
    && useradd --system --uid 10001 --gid squall --home-dir /home/squall --create-home squall
COPY --from=deps /opt/squall /opt/squall
# copied, not bind-mounted: buildah reused this layer with an old wheel when the wheel
# stage changed (its layer cache does not look into a bind mount)
COPY --from=wheel /wheels /tmp/wheels
RUN /opt/squall/bin/pip install --no-cache-dir --no-deps --no-index /tmp/wheels/*.whl \
    && rm -rf /tmp/wheels
ENV PATH=/opt/squall/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /home/squall
# /app on the path as in the worker image; the operator itself imports no topology code (it checks
# the graph only; the workers load the classes)
ENV PYTHONPATH=/app
ENTRYPOINT ["squall"]
CMD ["operator"]
