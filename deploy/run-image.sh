#!/usr/bin/env bash
# Runs the image with its default config and checks it as an operator would; exits non-zero on any failure.
#   deploy/run-image.sh [tag]            tag: portcullis (default); ENGINE=docker|podman (default: docker when
# its daemon answers, else podman). Checks: the HEALTHCHECK and the admin /healthz, the README's token flow
# (client_credentials for demo-service, then GET /api/orders/42), the process's uid, the store on the volume,
# a clean exit on SIGTERM; prints the image size. The container is removed afterwards, its volume with it.
set -euo pipefail
tag="${1:-portcullis}"
engine="${ENGINE:-}"
if [ -z "$engine" ] || [ "$engine" = buildah ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker; else engine=podman; fi
fi
name="portcullis-check-$$"
work="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-run.XXXXXX")"
cleanup() {
  "$engine" rm -f -v "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  echo "--- container log (last 40 lines)" >&2
  "$engine" logs "$name" 2>&1 | tail -40 >&2 || true
  exit 1
}

flags=()
if [ "$engine" = podman ]; then
  # crun (podman's default runtime on Debian 12) refuses hosts with cgroup v1 and v2 mounted side by side
  # ("cgroups in hybrid mode not supported"), as on this CI's VM; runc runs there.
  if command -v runc >/dev/null; then flags+=(--runtime "${PODMAN_RUNTIME:-runc}"); fi
  # Rootful podman asks for nofile=1048576 and nproc=4194304; without CAP_SYS_RESOURCE (CI's sandbox drops it)
  # podman itself falls back to at most 32768 processes and the runtime cannot raise the container's limits
  # above what it inherited: ask for no more than that.
  nofile="$(ulimit -Hn)" nproc="$(ulimit -Hu)"
  if [ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ]; then nproc=32768; fi
  if [ "$nofile" = unlimited ] || [ "$nofile" -gt 1048576 ]; then nofile=1048576; fi
  flags+=(--ulimit "nofile=$nofile:$nofile" --ulimit "nproc=$nproc:$nproc")
fi

size="$("$engine" image inspect --format '{{.Size}}' "$tag")"
echo "image $tag: $size bytes ($(( (size + 500000) / 1000000 )) MB)"

# Free ports on the loopback, chosen by the engine: the image's own 8080 and 9090 may be taken here.
# podman without systemd (CI) logs errors for the HEALTHCHECK's timer it cannot make: shown only on failure.
"$engine" run -d --name "$name" "${flags[@]}" -p 127.0.0.1::8080 -p 127.0.0.1::9090 "$tag" >/dev/null \
  2>"$work/run.err" || { cat "$work/run.err" >&2; fail "$engine run failed"; }
port_of() { "$engine" port "$name" "$1/tcp" | head -1 | sed 's/.*://'; }
api="http://127.0.0.1:$(port_of 8080)" admin="http://127.0.0.1:$(port_of 9090)"
echo "container $name ($engine): API $api, admin $admin"

status=""
for _ in $(seq 1 60); do
  [ "$("$engine" inspect --format '{{.State.Running}}' "$name")" = true ] || fail "the container exited"
  status="$(curl -s -o /dev/null -w '%{http_code}' "$admin/healthz" || true)"
  [ "$status" = 200 ] && break
  sleep 1
done
[ "$status" = 200 ] || fail "admin /healthz answered '$status' after 60 s"
echo "ok  admin /healthz: 200"

# The image's own HEALTHCHECK, inside the container (podman runs it on demand; docker on its interval).
if [ "$engine" = podman ]; then
  podman healthcheck run "$name" >/dev/null || fail "the HEALTHCHECK failed"
else
  health=""
  for _ in $(seq 1 30); do
    health="$(docker inspect --format '{{.State.Health.Status}}' "$name")"
    [ "$health" = healthy ] && break
    sleep 1
  done
  [ "$health" = healthy ] || fail "HEALTHCHECK status: $health"
fi
echo "ok  HEALTHCHECK passes"

# The README's Quick start, through the container.
curl -s -u demo-service:demo-secret-change-me -d grant_type=client_credentials -d scope=echo:read \
  -o "$work/token.json" -w '%{http_code}' "$api/token" >"$work/token.status" || true
[ "$(cat "$work/token.status")" = 200 ] || fail "POST /token answered $(cat "$work/token.status"): $(cat "$work/token.json")"
token="$(node -pe 'JSON.parse(require("fs").readFileSync(0)).access_token' <"$work/token.json")"
echo "ok  POST /token (client_credentials, demo-service, echo:read): 200"
status="$(curl -s -o "$work/echo.json" -w '%{http_code}' "$api/api/orders/42?expand=items" -H "Authorization: Bearer $token")"
[ "$status" = 200 ] || fail "GET /api/orders/42 with the token answered $status: $(cat "$work/echo.json")"
subject="$(node -pe 'JSON.parse(require("fs").readFileSync(0)).headers["x-auth-subject"]' <"$work/echo.json")"
[ "$subject" = demo-service ] || fail "the upstream saw x-auth-subject '$subject', not demo-service"
echo "ok  GET /api/orders/42 with the token: 200, x-auth-subject: demo-service"
status="$(curl -s -o /dev/null -w '%{http_code}' "$api/api/orders/42")"
[ "$status" = 401 ] || fail "GET /api/orders/42 without a token answered $status"
echo "ok  GET /api/orders/42 without a token: 401"

# PID 1 is node itself (exec-form ENTRYPOINT), as uid 1000; the store it created on the volume is its own.
pid1="$("$engine" exec "$name" cat /proc/1/status /proc/1/cmdline | tr '\0' ' ')"
uids="$(awk '/^Uid:/ { print $2, $3, $4, $5 }' <<<"$pid1")"
[ "$uids" = "1000 1000 1000 1000" ] || fail "PID 1 runs with uids '$uids', not 1000"
grep -q 'node dist/cli.js start' <<<"$pid1" || fail "PID 1 is not 'node dist/cli.js start': $(tail -1 <<<"$pid1")"
owner="$("$engine" exec "$name" stat -c %u /var/lib/portcullis/portcullis.db)" || fail "no store on the volume"
[ "$owner" = 1000 ] || fail "the store is owned by uid $owner"
echo "ok  PID 1 is 'node dist/cli.js start' as uid 1000 (non-root); the store on the volume is its own"

"$engine" stop -t 15 "$name" >/dev/null 2>"$work/stop.err" || { cat "$work/stop.err" >&2; fail "$engine stop failed"; }
code="$("$engine" inspect --format '{{.State.ExitCode}}' "$name")"
[ "$code" = 0 ] || fail "exit code $code on SIGTERM"
"$engine" logs "$name" 2>&1 | grep -q '"msg":"shut down"' || fail "no 'shut down' in the log"
echo "ok  SIGTERM: shut down, exit code 0"
echo "image $tag passed ($(( (size + 500000) / 1000000 )) MB)"
