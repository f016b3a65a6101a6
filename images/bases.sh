#!/usr/bin/env bash
# Make the local stand-ins for the two public base images, for machines that cannot pull from a registry:
#   LOCAL_PYTHON_BASE  Debian bookworm (debootstrap from the Debian mirror) with Python 3.11 and venv,
#                      in place of python:3.11-slim;
#   LOCAL_TF_BASE      that, plus CPU TensorFlow from PyPI in a venv on PATH, in place of the official
#                      tensorflow/tensorflow GPU image.
# An image that already exists is kept, so a second run costs nothing. Needs root and podman.
set -euo pipefail
cd "$(dirname "$0")/.."
. images/common.sh

MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
read -r -a BUILD_MOUNTS <<<"$(host_build_mounts)"

if podman image exists "$LOCAL_PYTHON_BASE"; then
    echo "kept $LOCAL_PYTHON_BASE"
else
    started=$SECONDS
    rootfs=$(mktemp -d /var/tmp/ttj-base.XXXXXX)
    trap 'rm -rf "$rootfs"' EXIT
    echo "debootstrap $SUITE from $MIRROR into $rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
        "$SUITE" "$rootfs" "$MIRROR"
    # Keep the image small, as the slim images do: no package caches or lists.
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -c . | podman import \
        --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV=LANG=C.UTF-8' \
        --change 'CMD=["python3"]' \
        - "$LOCAL_PYTHON_BASE"
    rm -rf "$rootfs"
    trap - EXIT
    echo "== made $LOCAL_PYTHON_BASE in $((SECONDS - started)) s"
fi

if podman image exists "$LOCAL_TF_BASE"; then
    echo "kept $LOCAL_TF_BASE"
else
    started=$SECONDS
    podman build "${BUILD_MOUNTS[@]}" \
        --build-arg PYTHON_IMAGE="$LOCAL_PYTHON_BASE" --build-arg TF_VERSION="$LOCAL_TF_VERSION" \
        -t "$LOCAL_TF_BASE" -f images/tensorflow-cpu-base.Containerfile images
    echo "== made $LOCAL_TF_BASE in $((SECONDS - started)) s"
fi
