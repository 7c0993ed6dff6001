#!/usr/bin/env bash
# Installs what weft needs to build, test and benchmark on Debian 12 (run as root).
# CUDA is optional and not installed here: a build finds nvcc on PATH by itself.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends \
  gcc g++ libc6-dev pkg-config meson ninja-build libcmocka-dev \
  libopenmpi-dev openmpi-bin clang-format clang libclang-rt-14-dev iproute2 nftables
