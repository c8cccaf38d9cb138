# Image for compose.yaml (Docker users only; the default path needs no Docker).
# The wheel is built in a throwaway stage and installed as users install it (not editable), so
# the image proves that the package carries everything it needs (migrations, event schemas).
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY contracts contracts
COPY spectral spectral
COPY producers producers
COPY consumers consumers
COPY schemas schemas
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim
COPY --from=build /wheels /wheels
# /var/lib/spectral/work-journal: the executor's response journal; a named volume mounted there
# starts with this ownership (compose.yaml), so the executor, running as nobody, can write it.
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && mkdir /home/spectral && chown nobody:nogroup /home/spectral \
    && mkdir -p /var/lib/spectral/work-journal && chown -R nobody:nogroup /var/lib/spectral
WORKDIR /home/spectral
ENV HOME=/home/spectral
USER nobody
ENV SPECTRAL_LOG_FORMAT=json SPECTRAL_METRICS_HOST=0.0.0.0
EXPOSE 8000 9100
CMD ["spectral", "--help"]
