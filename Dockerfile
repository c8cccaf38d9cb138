# Image for compose.yaml (Docker users only; the default path needs no Docker).
# The wheel is built in a throwaway stage and installed as users install it (not editable), so
# the image proves that the package carries everything it needs (migrations, event schemas).
# The failure-cluster record's fast contract check (native/) is Rust: the build stage borrows the
# official Rust image's toolchain (both images are Debian bookworm) and Debian's C linker.
FROM rust:1-slim-bookworm AS rust

FROM python:3.11-slim-bookworm AS build
COPY --from=rust /usr/local/cargo /usr/local/cargo
COPY --from=rust /usr/local/rustup /usr/local/rustup
ENV CARGO_HOME=/usr/local/cargo RUSTUP_HOME=/usr/local/rustup PATH=/usr/local/cargo/bin:$PATH
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md LICENSE ./
COPY native native
COPY contracts contracts
COPY spectral spectral
COPY producers producers
COPY consumers consumers
COPY schemas schemas
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
COPY --from=build /wheels /wheels
# /var/lib/spectral/work-journal: the executor's response journal; a named volume mounted there
# starts with this ownership (compose.yaml), so the executor, running as nobody, can write it.
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && python -c "import spectral.contracts._wire" \
    && mkdir /home/spectral && chown nobody:nogroup /home/spectral \
    && mkdir -p /var/lib/spectral/work-journal && chown -R nobody:nogroup /var/lib/spectral
WORKDIR /home/spectral
ENV HOME=/home/spectral
USER nobody
ENV SPECTRAL_LOG_FORMAT=json SPECTRAL_METRICS_HOST=0.0.0.0
EXPOSE 8000 9100
CMD ["spectral", "--help"]
