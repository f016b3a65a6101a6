#!/usr/bin/env bash
# Push the images `make image` built (log in to the registry first), with the engine that built them.
set -euo pipefail
cd "$(dirname "$0")/.."
. images/common.sh

engine=$(pick_engine)
for image in "$OPERATOR_IMAGE" "$TRAINER_IMAGE"; do
    echo "== $engine push $image"
    "$engine" push "$image"
done
