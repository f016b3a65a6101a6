#!/usr/bin/env bash
# Make sure the host has what the image scripts run: `images/host_tools.sh podman buildah ... [pyyaml]`.
# Each argument is a command, or `pyyaml`: PyYAML importable by $IMAGE_TOOLS_PYTHON (default python3).
# What is missing is installed with apt-get when running as root where apt-get exists (Debian, Ubuntu);
# anywhere else the script stops with one line naming what to install. TTJ_IMAGE_TOOLS_INSTALL=0 turns
# the installing off (then it only says what is missing).
set -euo pipefail

python=${IMAGE_TOOLS_PYTHON:-python3}

# The Debian package that brings each tool (a command not listed comes in the package of its name).
package_of() {
    case $1 in
        pyyaml) echo python3-yaml ;;
        unshare) echo util-linux ;;
        mount) echo mount ;;
        chroot) echo coreutils ;;
        *) echo "$1" ;;
    esac
}

present() {
    if [ "$1" = pyyaml ]; then
        "$python" -c 'import yaml' >/dev/null 2>&1
    else
        command -v "$1" >/dev/null 2>&1
    fi
}

# Sets $missing and $packages from the arguments.
find_missing() {
    missing=()
    packages=()
    local tool package
    for tool in "$@"; do
        present "$tool" && continue
        missing+=("$tool")
        package=$(package_of "$tool")
        [[ " ${packages[*]} " == *" $package "* ]] || packages+=("$package")
    done
}

find_missing "$@"
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "${TTJ_IMAGE_TOOLS_INSTALL:-1}" != 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "== apt-get install ${packages[*]} (for ${missing[*]})"
    export DEBIAN_FRONTEND=noninteractive
    # A fresh machine's package lists are often empty or stale.
    apt-get update -qq
    apt-get install -y -qq "${packages[@]}" >/dev/null
    find_missing "$@"
    [ ${#missing[@]} -eq 0 ] && exit 0
    echo "still missing after apt-get install: ${missing[*]} (PyYAML for $python: $python -m pip install PyYAML)" >&2
    exit 1
fi
echo "missing ${missing[*]}: install ${packages[*]} (as root on Debian/Ubuntu: apt-get install -y ${packages[*]})" >&2
exit 1
