#!/usr/bin/env bash
# `make bench-serve-compare`: `lumen bench serve` with thumbor and nginx's image filter driven by
# the same client, the same workloads and the same source bytes (Lumen's in-process loopback
# origin), and wrk on the hot workload of all three as a second opinion.
#
# Comparison tooling only: Lumen never needs Python or nginx. This installs what is missing
# (Debian: nginx, libnginx-mod-http-image-filter, wrk, python3-venv; thumbor from PyPI into the
# virtual environment LUMEN_BENCH_VENV, default .build/bench-venv), starts thumbor (as many
# processes as cores), nginx (as many workers as cores) and `lumen serve` on loopback ports, each with its own
# configuration in a temporary directory (never the system's), runs the benchmark, and stops
# everything it started. Arguments are passed to `lumen bench serve` (e.g. --json).
set -euo pipefail
cd "$(dirname "$0")/.."

LUMEN="${LUMEN:-.build/release/lumen}"
VENV="${LUMEN_BENCH_VENV:-.build/bench-venv}"
CORES="$(nproc)"
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
say() { echo "bench-serve-compare: $*" >&2; }

# Debian packages, only those missing.
missing=()
for p in nginx libnginx-mod-http-image-filter wrk python3-venv python3-pip; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]} (apt)"
    if ! apt-cache policy "${missing[@]}" 2>/dev/null | grep -q 'Candidate: [0-9]'; then $SUDO apt-get update; fi
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
IMAGE_FILTER=/usr/lib/nginx/modules/ngx_http_image_filter_module.so
[ -f "$IMAGE_FILTER" ] || { say "no $IMAGE_FILTER"; exit 1; }

# thumbor in its own virtual environment.
if [ ! -x "$VENV/bin/thumbor" ]; then
    say "installing thumbor into $VENV (pip)"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet thumbor
fi
PYTHON="$VENV/bin/python"
[ -x "$LUMEN" ] || { say "no $LUMEN: run 'swift build -c release' first (make bench-serve-compare does)"; exit 1; }

WORK="$(mktemp -d /tmp/lumen-bench-serve.XXXXXX)"
chmod 755 "$WORK" # nginx's workers run as nobody and read the static file
started=()
# A process and its descendants (thumbor's forks outlive their parent when only it is killed).
tree() {
    local pid child
    for pid in "$@"; do
        echo "$pid"
        for child in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do tree "$child"; done
    done
}
cleanup() {
    local pids
    pids=$(tree "${started[@]}")
    for pid in $pids; do kill "$pid" 2>/dev/null || true; done
    for pid in "${started[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Three free loopback ports (the kernel picks them).
read -r THUMBOR_PORT NGINX_PORT LUMEN_PORT < <("$PYTHON" - <<'PY'
import socket
sockets = [socket.socket() for _ in range(3)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])
PY
)

waitForPort() { # name port
    for _ in $(seq 1 100); do
        if "$PYTHON" -c "import socket,sys; socket.create_connection(('127.0.0.1', $2), 0.2)" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    say "$1 did not start on port $2"; exit 1
}

# thumbor: JPEG quality as Lumen's default (85); originals and results kept in files (its
# usual deployment), results also for unsafe URLs so the hot workload is a cached result.
mkdir -p "$WORK/thumbor"
cat >"$WORK/thumbor/thumbor.conf" <<CONF
ALLOW_UNSAFE_URL = True
QUALITY = 85
FILE_STORAGE_ROOT_PATH = '$WORK/thumbor/storage'
RESULT_STORAGE = 'thumbor.result_storages.file_storage'
RESULT_STORAGE_FILE_STORAGE_ROOT_PATH = '$WORK/thumbor/results'
RESULT_STORAGE_STORES_UNSAFE = True
CONF
"$VENV/bin/thumbor" -i 127.0.0.1 -p "$THUMBOR_PORT" -c "$WORK/thumbor/thumbor.conf" --processes "$CORES" -l error \
    >"$WORK/thumbor/log" 2>&1 &
THUMBOR_PID=$!
started+=("$THUMBOR_PID")

# nginx: the image filter resizes what it proxies from the origin (whose port is in the path);
# /hot.jpg is Lumen's 512-px result as a static file.
mkdir -p "$WORK/nginx/static" "$WORK/nginx/tmp"
cat >"$WORK/nginx/nginx.conf" <<CONF
load_module $IMAGE_FILTER;
daemon off;
worker_processes $CORES;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log warn;
events { worker_connections 1024; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/tmp/body;
    proxy_temp_path $WORK/nginx/tmp/proxy;
    fastcgi_temp_path $WORK/nginx/tmp/fastcgi;
    uwsgi_temp_path $WORK/nginx/tmp/uwsgi;
    scgi_temp_path $WORK/nginx/tmp/scgi;
    types { image/jpeg jpg; }
    keepalive_requests 1000000;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location ~ ^/resize/(\d+)/(\d+)/(\d+)/(.+)\$ {
            proxy_pass http://127.0.0.1:\$3/\$4;
            image_filter resize \$1 \$2;
            image_filter_buffer 50M;
            image_filter_jpeg_quality 85;
        }
        location = /hot.jpg { root $WORK/nginx/static; }
    }
}
CONF
nginx -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" -e "$WORK/nginx/error.log" &
NGINX_PID=$!
started+=("$NGINX_PID")

# `lumen serve` as its own process too (as deployed), so that its peak RSS is the server's alone:
# the in-process one shares its process with the origin and the 200 burst clients.
"$LUMEN" serve --listen "127.0.0.1:$LUMEN_PORT" --allow-unsigned --allow-source-address 127.0.0.1/32 >/dev/null 2>&1 &
LUMEN_PID=$!
started+=("$LUMEN_PID")

waitForPort thumbor "$THUMBOR_PORT"
waitForPort "lumen serve" "$LUMEN_PORT"
waitForPort nginx "$NGINX_PORT"
say "thumbor $("$VENV/bin/thumbor" --version 2>&1 | head -1) on :$THUMBOR_PORT ($CORES processes); $(nginx -v 2>&1) on :$NGINX_PORT ($CORES workers)"

"$LUMEN" bench serve --wrk \
    --compare "thumbor=http://127.0.0.1:$THUMBOR_PORT/unsafe/fit-in/{w}x{h}/{source}" --pid "thumbor=$THUMBOR_PID" \
    --compare "nginx=http://127.0.0.1:$NGINX_PORT/resize/{w}/{h}/{origin-port}/{path}" --pid "nginx=$NGINX_PID" \
    --compare "lumen-serve=http://127.0.0.1:$LUMEN_PORT/_/w:{w},h:{h},fit:contain/plain/{source}" --pid "lumen-serve=$LUMEN_PID" \
    --hot-url "nginx=http://127.0.0.1:$NGINX_PORT/hot.jpg" --write-hot-result "$WORK/nginx/static/hot.jpg" \
    "$@"
