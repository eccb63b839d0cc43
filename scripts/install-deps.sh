#!/usr/bin/env bash
# Installs the Debian packages Lumen builds against, only those that are missing.
# Runs as root, or through sudo when not root. Set LUMEN_HEIF=1 to add libheif (HEIC/AVIF).
set -euo pipefail

packages=(
    pkg-config          # finds the C libraries for SwiftPM's systemLibrary targets
    libturbojpeg0-dev   # libjpeg-turbo, TurboJPEG API: JPEG decode at 1/8..1 scale, encode
    libspng-dev         # libspng: PNG decode/encode
    libisal-dev         # Intel ISA-L: fast inflate for PNG image data
    libwebp-dev         # libwebp, libwebpdemux, libwebpmux: WebP decode/encode, animation
    libgif-dev          # giflib: GIF decode
    liblcms2-dev        # lcms2: ICC profile conversion to sRGB
    libssl-dev          # OpenSSL libcrypto: SHA-256 names for disk-cache entries
    libcurl4-openssl-dev # libcurl: CurlDataLoader, HTTP through libcurl's multi interface
    ca-certificates     # the CA store libcurl verifies https servers against (only recommended by libcurl)
    libmicrohttpd-dev   # libmicrohttpd: the HTTP layer of LumenServer (`lumen serve`)
    libhiredis-dev      # hiredis: the fleet's shared second level (`lumen serve --redis`)
    redis-server        # Redis, started by the fleet tests and `lumen demo --fleet` (never as a service)
    nginx               # nginx, the fleet's consistent-hashing front (tests, `lumen demo --fleet`)
)
if [ "${LUMEN_HEIF:-0}" = "1" ]; then
    packages+=(libheif-dev)
fi

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
        echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1
    fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# redis-server and nginx are run by Lumen's tests and demo on loopback ports of their own; the
# packages' scripts must not start them as system services (port 80, 6379) while installing.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    made_policy=1
fi
status=0
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" || status=$?
if [ "$made_policy" = 1 ]; then $sudo rm -f "$policy"; fi
exit "$status"
