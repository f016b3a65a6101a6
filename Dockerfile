# The operator image: `make image`. Multi-stage, so compilers and pip caches stay in the builder;
# it carries only the operator package (no TensorFlow) and runs as a non-root user.
FROM python:3.11-slim AS builder
WORKDIR /src
COPY operator/ /src/operator/
RUN python -m venv /opt/ttj \
 && /opt/ttj/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/ttj/bin/pip install --no-cache-dir /src/operator

FROM python:3.11-slim
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
