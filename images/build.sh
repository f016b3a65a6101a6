#!/usr/bin/env bash
# Build the operator and trainer images from the repository root: with Docker when its daemon answers,
# else with podman (see images/common.sh). Arguments name the images to build: operator, trainer (both
# when none is given).
#   IMAGE_BASES=local   build on the local stand-in bases of images/bases.sh instead of the public ones,
#                       with the host's CA certificates and pip configuration mounted into RUN steps.
# Prints each image's build time, so that docs/benchmarks.md can quote it.
set -euo pipefail
cd "$(dirname "$0")/.."
. images/common.sh

engine=$(pick_engine)
operator_args=()
trainer_args=()
if [ "${IMAGE_BASES:-public}" = local ]; then
    [ "$engine" = podman ] || { echo "IMAGE_BASES=local needs podman (images/bases.sh makes the bases there)" >&2; exit 1; }
    read -r -a mounts <<<"$(host_build_mounts)"
    operator_args+=("${mounts[@]}" --build-arg "PYTHON_IMAGE=$LOCAL_PYTHON_BASE")
    trainer_args+=("${mounts[@]}" --build-arg "TF_IMAGE=$LOCAL_TF_BASE")
fi

build() {
    local image=$1 started=$SECONDS
    shift
    echo "== $engine build $image"
    "$engine" build --label "org.opencontainers.image.version=$VERSION" "$@" -t "$image" .
    echo "== built $image in $((SECONDS - started)) s"
}
[ $# -gt 0 ] || set -- operator trainer
for which in "$@"; do
    case $which in
        operator) build "$OPERATOR_IMAGE" "${operator_args[@]}" -f Dockerfile ;;
        trainer) build "$TRAINER_IMAGE" "${trainer_args[@]}" -f trainer-image/Dockerfile ;;
        *) echo "unknown image '$which' (operator or trainer)" >&2; exit 2 ;;
    esac
done
