# syntax=docker/dockerfile:1
# The predictor image that manifests/10-serving-runtime.yaml names
# (ghcr.io/modelctl/predictor:0.1.0): `python -m predictor`, KServe's custom-runtime
# contract (HTTP 8080, gRPC 8081, model files under /mnt/models, downloaded from the
# InferenceService's storageUri). No model weights are baked in.
#
# GPU nodes (the default): a CUDA runtime image whose Python 3.11 already has a CUDA
# build of torch, which satisfies pyproject.toml's torch requirement and is kept.
#   docker build -t ghcr.io/modelctl/predictor:0.1.0 .
# CPU nodes: a slim Python image; torch comes from PyTorch's CPU wheel index at the
# version constraints.txt pins (PyPI's default torch wheel is the multi-GB CUDA one).
#   docker build -t ghcr.io/modelctl/predictor:0.1.0-cpu \
#     --build-arg BASE_IMAGE=python:3.11-slim-bookworm \
#     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .

ARG BASE_IMAGE=pytorch/pytorch:2.9.1-cuda12.8-cudnn9-runtime
ARG BUILD_IMAGE=python:3.11-slim-bookworm

# Stage 1: the project's wheel, built from pyproject.toml and the sources only.
FROM ${BUILD_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY common/ common/
COPY captures/ captures/
COPY accuracy/ accuracy/
COPY registry/ registry/
COPY predictor/ predictor/
COPY rollout/ rollout/
COPY shadow/ shadow/
COPY devstack/ devstack/
COPY deploycheck/ deploycheck/
COPY cli/ cli/
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# Stage 2: the runtime. Dependencies come from the wheel's metadata, that is from
# pyproject.toml: there is no second list to drift.
FROM ${BASE_IMAGE} AS runtime
ARG TORCH_INDEX_URL=""
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY constraints.txt /tmp/build/constraints.txt
COPY --from=wheel /wheels /tmp/build/wheels
# The import at the end fails the build, not the first pod, if anything is missing.
RUN if [ -n "${TORCH_INDEX_URL}" ]; then \
        python -m pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" \
            -c /tmp/build/constraints.txt torch; \
    fi \
    && python -m pip install --no-cache-dir /tmp/build/wheels/*.whl \
    && python -c "import cli, common, deploycheck, devstack, predictor, registry, rollout, shadow, torch" \
    && rm -rf /tmp/build \
    && useradd --uid 1000 --user-group --home-dir /tmp --no-create-home \
        --shell /usr/sbin/nologin modelctl
# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 1000:1000
# The pod mounts an emptyDir here; the root filesystem is read-only.
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["python", "-m", "predictor"]
