#!/usr/bin/env bash
# Make sure the build's one non-toolkit dependency (cJSON) and the build tools
# are present; on Debian/Ubuntu install what is missing (as root, or via sudo).
set -euo pipefail
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v cc >/dev/null || need+=(gcc)
command -v make >/dev/null || need+=(make)
if [ ! -f /usr/include/cjson/cJSON.h ] && [ -z "${CJSON_ROOT:-}" ]; then need+=(libcjson-dev); fi
[ ${#need[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "fp4bench needs: ${need[*]} (install them, or set CJSON_ROOT to a cJSON prefix)" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "installing ${need[*]}" >&2
$sudo apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
