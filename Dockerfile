# The operator image: `make image`, from the repository root. Multi-stage, so compilers and pip caches
# stay in the builder; it carries only the contract and the operator (no extras: no TensorFlow, no local
# cluster, no plotting) and runs as a non-root user.
# PYTHON_IMAGE: a stand-in base where no registry can be reached (images/bases.sh, `make image-test`).
ARG PYTHON_IMAGE=python:3.11-slim
FROM ${PYTHON_IMAGE} AS builder
WORKDIR /src
COPY contract/ /src/contract/
COPY operator/ /src/operator/
# Both named in one command, so the operator's `ttj-contract` dependency is this one, never an index's.
RUN python -m venv /opt/ttj \
 && /opt/ttj/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/ttj/bin/pip install --no-cache-dir /src/contract /src/operator

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="ttj-operator" \
      org.opencontainers.image.description="TransientTrainingJob operator" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=builder /opt/ttj /opt/ttj
# 65532 matches runAsUser in manifests/base/deployment.yaml.
RUN groupadd --gid 65532 ttj && useradd --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin ttj
USER 65532:65532
ENV PATH=/opt/ttj/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
EXPOSE 8080 8081
ENTRYPOINT ["ttj"]
CMD ["operator", "--all-namespaces"]
