# Toolgate production image: slim Python, dependencies in their own layer, non-root.
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY tool_registry ./tool_registry
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --system --uid 10001 --home-dir /app toolgate
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
COPY config ./config
USER toolgate
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --retries=3 \
  CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=2)" || exit 1
# Listening beyond loopback needs tenants (API keys) in the config, or server.allow_open.
CMD ["toolgate", "serve", "--config", "/app/config/gateway.yaml", "--host", "0.0.0.0", "--port", "8080"]
