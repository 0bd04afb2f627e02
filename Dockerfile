# The control plane: HTTP API, node gateway and engine workers (`better-compute serve`), for GKE, EKS and DOKS.
#   docker build -t better-compute/control-plane .
#   docker run --rm -e BC_DATABASE_URL=postgresql://... -e BC_SECRET=... better-compute/control-plane db upgrade
#   docker run -d -e BC_DATABASE_URL=... -e BC_SECRET=... -e BC_BASE_URL=https://... -p 8080:8080 \
#     better-compute/control-plane
# Run as many replicas as you like on one PostgreSQL database (docs/replicas.md); credentials: docs/credentials.md.

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY src ./src
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[aws,gcp,digitalocean,postgres]"

FROM python:3.11-slim
COPY --from=build /wheels /wheels
# Our own wheel and its locked dependencies from /wheels, no index: the build stage pinned them.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --find-links /wheels "better-compute[aws,gcp,digitalocean,postgres]" \
    && rm -rf /wheels \
    && useradd --system --uid 10001 --create-home --home-dir /var/lib/better-compute better-compute
USER 10001
ENV PYTHONUNBUFFERED=1 \
    BC_DATA_DIR=/var/lib/better-compute
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["better-compute"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
