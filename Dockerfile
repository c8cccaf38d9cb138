# Image for compose.yaml (Docker users only; the default path needs no Docker).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY contracts contracts
COPY spectral spectral
COPY producers producers
COPY consumers consumers
COPY schemas schemas
RUN pip install --no-cache-dir -e .
USER nobody
