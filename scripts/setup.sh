#!/usr/bin/env bash
# Configures ./build (again, if it exists) with the given meson options.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -f build/build.ninja ]; then
  meson setup --reconfigure build "$@"
else
  meson setup build "$@"
fi
