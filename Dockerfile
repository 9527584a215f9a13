# syntax=docker/dockerfile:1
# gpugate's image: build a wheel, install it with its dependencies into a virtualenv, and copy
# only that virtualenv into a slim runtime (no compilers, no pip cache, no sources).
#   docker build -t gpugate:0.1.0 .
#   make image   (buildah; PYTHON_IMAGE from Debian packages when unset: docs/operations.md)
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
 && python -m venv /opt/gpugate \
 && /opt/gpugate/bin/pip install --no-cache-dir /wheels/*.whl

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/gpugate /opt/gpugate
# The shipped policies, so the image runs on its own; in a cluster a ConfigMap is mounted here.
COPY policies/*.yaml /etc/gpugate/policies/
ENV PATH=/opt/gpugate/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The same non-root UID as the Deployment's securityContext (65532, "nonroot").
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpugate"]
CMD ["serve", "--policies", "/etc/gpugate/policies", "--cert", "/etc/gpugate/tls/tls.crt", \
     "--key", "/etc/gpugate/tls/tls.key", "--bind", "0.0.0.0:8443"]
