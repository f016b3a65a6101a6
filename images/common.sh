# Shared settings of the image scripts (sourced, not run).
# IMAGE_REPO and VERSION name the images: the Makefile sets them (`make image`, `make image-test`).
# ENGINE=docker or podman overrides the choice below.

: "${IMAGE_REPO:?set IMAGE_REPO and VERSION, or run the script through make}"
: "${VERSION:?set IMAGE_REPO and VERSION, or run the script through make}"
OPERATOR_IMAGE=${OPERATOR_IMAGE:-$IMAGE_REPO/ttj-operator:$VERSION}
TRAINER_IMAGE=${TRAINER_IMAGE:-$IMAGE_REPO/ttj-trainer:$VERSION}

# The local stand-ins for the public base images (see images/bases.sh).
LOCAL_PYTHON_BASE=${LOCAL_PYTHON_BASE:-localhost/ttj-base/python:3.11-bookworm}
LOCAL_TF_VERSION=${LOCAL_TF_VERSION:-2.21.0}
LOCAL_TF_BASE=${LOCAL_TF_BASE:-localhost/ttj-base/tensorflow-cpu:$LOCAL_TF_VERSION-bookworm}

# Docker when its daemon answers (a client alone is not enough), else podman.
pick_engine() {
    if [ -n "${ENGINE:-}" ]; then
        echo "$ENGINE"
    elif command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        echo docker
    elif command -v podman >/dev/null 2>&1; then
        echo podman
    else
        echo "neither a running Docker engine nor podman was found" >&2
        return 1
    fi
}

# Without a daemon, podman builds with chroot isolation: it works as root inside a container, where
# cgroups and namespaces for a real runtime are unavailable. (Where overlay mounts are unavailable too, set
# driver = "vfs" in /etc/containers/storage.conf before the first podman command.)
export BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}

# For builds on the local bases: the host's CA certificates and pip configuration, mounted into every RUN
# step, so that pip inside the build reaches PyPI as the host does (a TLS-intercepting proxy, a mirror).
# The Dockerfiles stay as users need them. Set IMAGE_BUILD_MOUNTS to replace these (or to "" for none).
host_build_mounts() {
    local mounts="-v /etc/ssl/certs:/etc/ssl/certs:ro"
    [ -f /etc/pip.conf ] && mounts+=" -v /etc/pip.conf:/etc/pip.conf:ro"
    echo "${IMAGE_BUILD_MOUNTS-$mounts}"
}
