#!/usr/bin/env bash
# Copy the build dependencies installed here (Debian packages: CLI11, nlohmann-json, fmt
# headers, GoogleTest sources) into .deps/, for a machine that has none of them and cannot
# install packages (the GPU machine). CMake uses .deps/ only for what find_package misses.
# .deps/ is git-ignored; pass it to the device tool in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
PAGEDATTN_INSTALL_ONLY=1 bash scripts/setup.sh   # the packages whose files are copied
rm -rf .deps && mkdir -p .deps/include
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/fmt .deps/include/
cp -r /usr/src/googletest .deps/googletest
echo "vendored into .deps: $(du -sh .deps | cut -f1)"
