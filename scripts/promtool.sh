#!/usr/bin/env bash
# Prints the path of a promtool (Prometheus's checker of the metrics text
# format): the installed one, else one taken out of Debian's prometheus
# package into DIR without installing the package (which would start a
# Prometheus server). Usage: scripts/promtool.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/promtool.sh DIR}
if command -v promtool >/dev/null; then
    command -v promtool
    exit 0
fi
if [ ! -x "$dir/usr/bin/promtool" ]; then
    mkdir -p "$dir"
    (
        cd "$dir"
        apt-get download prometheus >/dev/null 2>&1 ||
            { apt-get update -qq >/dev/null && apt-get download prometheus >/dev/null; }
        dpkg-deb -x prometheus_*.deb .
        rm -f prometheus_*.deb
    )
fi
echo "$dir/usr/bin/promtool"
