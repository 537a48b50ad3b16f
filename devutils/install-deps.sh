#!/usr/bin/env bash
# System packages the test suite uses. Idempotent; needs root (or sudo) on
# Debian/Ubuntu when something is missing, and is a no-op otherwise.
set -euo pipefail

need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)

if [ ${#need[@]} -gt 0 ]; then
    echo "== installing ${need[*]}"
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"
fi
