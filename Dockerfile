# The API server image (used by docker-compose.yml). CPU only: the server never needs torch.
#
# Two stages. The build stage makes the wheel exactly as `pip install .` from a
# clone does: setup.py runs `npm ci` (package-lock.json pins every version) and
# puts the dashboard's and the API docs' browser assets into the wheel. The
# runtime stage installs that wheel with its `server` and `export` extras and
# nothing else: no npm, no source tree.

FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends nodejs npm \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md alembic.ini ./
COPY migrations ./migrations
COPY training_platform ./training_platform
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist .

FROM python:3.11-slim
COPY --from=build /dist/ /tmp/dist/
# The `server` extra: the wheel alone is the trainer side's install (no FastAPI, no SQLAlchemy);
# `export`: pyarrow, so `GET .../export?format=parquet` works (without it: 501 extra_not_installed).
RUN wheel="$(echo /tmp/dist/*.whl)" \
    && pip install --no-cache-dir "${wheel}[server,export]" \
    && rm -rf /tmp/dist
WORKDIR /app
ENV PLATFORM_HOST=0.0.0.0 PLATFORM_PORT=8000 PLATFORM_METRICS_DIR=/data/platform_metrics
EXPOSE 8000
CMD ["training-platform", "serve"]
