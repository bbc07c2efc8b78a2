# The API server image (used by docker-compose.yml). CPU only: the server never needs torch.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY training_platform ./training_platform
COPY migrations ./migrations
RUN pip install --no-cache-dir -e .
ENV PLATFORM_HOST=0.0.0.0 PLATFORM_PORT=8000 PLATFORM_METRICS_DIR=/data/platform_metrics
EXPOSE 8000
CMD ["training-platform", "serve"]
