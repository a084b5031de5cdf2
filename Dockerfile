# Toolgate gateway image (docs/deploy.md).
#
#   docker build -t toolgate .                              # without a browser
#   docker build -t toolgate --build-arg WITH_CHROMIUM=true .  # with Debian's chromium
#
# Slim Python, the gateway installed from this project (with the PostgreSQL driver), run as an
# unprivileged user. The browser adapter drives Debian's chromium through Playwright; it is
# only installed when WITH_CHROMIUM=true (about 300 MB); without it, browser tools fail with a
# clear error and everything else works.
FROM python:3.11-slim

ARG WITH_CHROMIUM=false

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN if [ "$WITH_CHROMIUM" = "true" ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends chromium \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --create-home --uid 10001 --user-group toolgate

WORKDIR /app

# The package first (a layer that changes only with the code), then the declarations, the
# policy and the configuration the gateway loads from /app.
COPY pyproject.toml README.md ./
COPY gateway ./gateway
# [tools]: what the shipped tools.d runs besides the gateway (proc.run_tests runs pytest).
RUN pip install ".[postgres,tools]" && rm -rf build *.egg-info

COPY tools.d ./tools.d
COPY rego ./rego
COPY policies ./policies
COPY examples ./examples
COPY deploy/toolgate.yaml ./toolgate.yaml

# var/ holds the workspaces, the artifacts, the example database and the gateway's own files;
# compose mounts a shared volume on the first three (a new volume takes the owner of its
# mount point here, so each must exist and belong to toolgate).
RUN mkdir -p /app/var/workspaces/demo /app/var/workspaces/ops /app/var/artifacts /app/var/examples \
    && chown -R toolgate:toolgate /app/var

USER toolgate

EXPOSE 8080

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)"]

CMD ["toolgate", "serve"]
