#!/usr/bin/env bash
# Installs the Debian packages lpgossip needs, when they are missing.
# As root: apt-get update (a new machine's lists may be empty), then install.
# Otherwise: print the exact command and fail, so nothing half-builds.
set -eu
PKGS="build-essential pkg-config libzmq3-dev libczmq-dev libopenblas-dev libyaml-dev libcmocka-dev zlib1g-dev libpng-dev libjpeg62-turbo-dev libmicrohttpd-dev dataset-fashion-mnist gnuplot-nox iproute2 python3"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "lpgossip: missing Debian packages:$missing" >&2
    echo "run as root:  apt-get update && apt-get install -y$missing" >&2
    exit 1
fi
echo "lpgossip: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends $missing
