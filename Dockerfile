# Clearance: one image for every service; the command picks which one runs.
#
#   docker build -t clearance:latest .
#   docker run --rm -e CLEARANCE_NATS_URL=... -e CLEARANCE_REDIS_URL=... clearance:latest run decision
#
# The wheels it installs also carry nats-server and valkey-server, so `clearance up` (the
# embedded default) works inside the image too.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the package is built from (pyproject.toml names README.md as its readme).
COPY pyproject.toml README.md ./
COPY libs ./libs
COPY services ./services
RUN python -m venv /opt/clearance \
 && /opt/clearance/bin/pip install ./libs . \
 && /opt/clearance/bin/clearance --help > /dev/null

FROM python:3.11-slim
LABEL org.opencontainers.image.title="clearance" \
      org.opencontainers.image.description="Access-decision fabric for multi-cluster Kubernetes observability" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/clearance/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    CLEARANCE_METRICS_PORT=9090
RUN groupadd --system --gid 10001 clearance \
 && useradd --system --uid 10001 --gid clearance --home-dir /home/clearance --create-home \
        --shell /usr/sbin/nologin clearance
COPY --from=build /opt/clearance /opt/clearance
# Numeric, so that Kubernetes can check runAsNonRoot.
USER 10001:10001
WORKDIR /home/clearance
EXPOSE 9090
ENTRYPOINT ["clearance"]
CMD ["run", "all"]
