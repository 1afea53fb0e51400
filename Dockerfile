# syntax=docker/dockerfile:1.7
# lowbit images, one Dockerfile, three targets:
#   web         slim web server, no torch            docker build --target web .
#   worker-cpu  lab worker with the CPU build of torch   --target worker-cpu
#   worker-cuda lab worker on an NVIDIA CUDA runtime      --target worker-cuda
# All run as an unprivileged user and work with a read-only root filesystem
# (writable: /tmp and the data volume).

ARG PYTHON_VERSION=3.11
ARG TORCH_VERSION=2.13.0

# ---- static assets: htmx 2 + SSE extension from the committed lock file ----
FROM node:20-bookworm-slim AS static
WORKDIR /src
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --no-audit --no-fund
COPY static ./static
RUN mkdir -p static/vendor \
 && cp node_modules/htmx.org/dist/htmx.min.js static/vendor/htmx.min.js \
 && cp node_modules/htmx-ext-sse/dist/sse.js static/vendor/sse.js

# ---- shared Python base ----
FROM python:${PYTHON_VERSION}-slim-bookworm AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LOWBIT_DATA_DIR=/data
RUN groupadd --system --gid 10001 lowbit \
 && useradd --system --uid 10001 --gid lowbit --home-dir /app --shell /usr/sbin/nologin lowbit \
 && mkdir -p /data && chown lowbit:lowbit /data
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY app ./app
COPY labs ./labs
COPY migrations ./migrations
COPY content ./content
COPY templates ./templates
COPY --from=static /src/static ./static

# ---- web: no torch ----
FROM base AS web
RUN pip install --no-cache-dir .
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=15s --timeout=3s --start-period=20s --retries=3 \
  CMD ["python", "-c", "import urllib.request,sys; sys.exit(0 if urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2).status == 200 else 1)"]
CMD ["lowbit", "serve", "--host", "0.0.0.0", "--port", "8000"]

# ---- CPU worker: torch from the CPU wheel index (never a CUDA build here) ----
FROM base AS worker-cpu
ARG TORCH_VERSION
# gcc builds the native kernels (labs/quant/_kquants.c, _gptq.c) and leaves again;
# bubblewrap and libseccomp2 stay: the judge runs learner code under them.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev bubblewrap libseccomp2 \
 && pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu \
 && pip install --no-cache-dir ".[worker]" \
 && python -c "import labs.quant._kquants, labs.quant._gptq" \
 && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/*
USER 10001:10001
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["lowbit", "worker", "--check"]
CMD ["lowbit", "worker"]

# ---- CUDA worker: NVIDIA runtime base, CUDA build of torch ----
FROM nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 AS worker-cuda
ARG TORCH_VERSION
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    LOWBIT_DATA_DIR=/data LOWBIT_WORKER_QUEUES=gpu,cpu VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev gcc libc6-dev \
    bubblewrap libseccomp2 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 lowbit \
 && useradd --system --uid 10001 --gid lowbit --home-dir /app --shell /usr/sbin/nologin lowbit \
 && mkdir -p /data && chown lowbit:lowbit /data \
 && python3 -m venv /opt/venv
WORKDIR /app
COPY --from=base /app /app
RUN pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cu128 \
 && pip install --no-cache-dir ".[worker]" \
 && python -c "import labs.quant._kquants, labs.quant._gptq"
USER 10001:10001
HEALTHCHECK --interval=15s --timeout=5s --start-period=90s --retries=3 \
  CMD ["lowbit", "worker", "--check"]
CMD ["lowbit", "worker"]
