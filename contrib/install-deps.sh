#!/bin/sh
# Installs the Debian 12 packages that sinkwatch builds and tests with.
# Run as root (or with sudo available). Safe to run again.
set -eu
# libclang-rt-14-dev holds libFuzzer (-fsanitize=fuzzer, make fuzz); clang only
# recommends it, and recommends are not installed here. python3-venv, -pip,
# -setuptools and -wheel: tests/e2e/venv.py pip-installs contrib/python
# offline into a venv; xarray and pandas are its [notebook] extra
PKGS="build-essential autoconf automake libtool pkg-config
libuv1-dev libzmq3-dev libmsgpack-dev libhdf5-dev hdf5-tools check libsystemd-dev libmicrohttpd-dev
python3 python3-numpy python3-h5py python3-zmq python3-msgpack python3-matplotlib
python3-torch python3-scipy python3-sklearn python3-prometheus-client
python3-venv python3-pip python3-setuptools python3-wheel python3-xarray python3-pandas
libjs-dygraphs chromium chromium-driver python3-selenium clang libclang-rt-14-dev"
SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || { echo "install-deps: run as root or install sudo" >&2; exit 1; }
	SUDO=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
# shellcheck disable=SC2086
$SUDO apt-get install -y -q --no-install-recommends $PKGS
