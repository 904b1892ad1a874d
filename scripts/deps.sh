#!/usr/bin/env bash
# Installs what tq needs to build and test, from Debian's packages, when it
# is missing. Safe to run again; does nothing when all is there.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libsqlite3-dev sqlite3 libjansson-dev
      libcmocka-dev jq libpq-dev postgresql faketime fiu-utils clang-format tzdata
      libmicrohttpd-dev curl)
# Extra packages a target needs (make fuzz: clang), given as arguments.
pkgs+=("$@")
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing+=("$p")
done
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi
