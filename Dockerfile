# Toolgate production image: slim Python, dependencies in their own layer, non-root.
# Every distribution comes from the lock files (requirements/*.txt, pinned with hashes):
# the image runs the versions `make test` tested.
FROM python:3.11-slim AS build
WORKDIR /src
COPY requirements/build.txt ./requirements/
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements/build.txt
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY tool_registry ./tool_registry
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --home-dir /app toolgate
WORKDIR /app
COPY requirements/runtime.txt /tmp/runtime.txt
RUN pip install --no-cache-dir --require-hashes --no-deps -r /tmp/runtime.txt && rm /tmp/runtime.txt
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-deps /wheels/*.whl && rm -rf /wheels
COPY config ./config
USER toolgate
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
# Listening beyond loopback needs tenants (API keys) in the config, or server.allow_open.
CMD ["toolgate", "serve", "--config", "/app/config/gateway.yaml", "--host", "0.0.0.0", "--port", "8080"]
