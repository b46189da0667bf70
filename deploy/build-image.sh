#!/usr/bin/env bash
# Builds the image from the Dockerfile, then runs it and checks it (deploy/run-image.sh).
#   deploy/build-image.sh [tag]          tag: portcullis (default)
# With a Docker daemon: `docker build`. Without one, as root: buildah, and podman to run it (Debian 12:
# apt-get install buildah podman runc mmdebstrap); when no registry serves the Dockerfile's base image,
# deploy/base-image/build.sh makes it locally. Environment: ENGINE=docker|buildah (default: docker when its daemon
# answers), BUILDAH_ISOLATION (default oci; chroot where no namespaces can be made), BUILDAH_RUNTIME (default runc),
# PORTCULLIS_SKIP_RUN=1 to build only.
set -euo pipefail
cd "$(dirname "$0")/.."
tag="${1:-portcullis}"
started=$SECONDS

engine="${ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v docker >/dev/null && docker info >/dev/null 2>&1; then engine=docker
  elif command -v buildah >/dev/null; then engine=buildah
  else echo "$0: no Docker daemon answers and buildah is not installed" >&2; exit 1
  fi
fi

if [ "$engine" = docker ]; then
  docker build -t "$tag" .
else
  # The base image(s): pulled when a registry serves them, else made here. One FROM line names the major
  # of Node.js the image runs, and the base image script takes it from there.
  for base in $(awk 'toupper($1) == "FROM" { print $2 }' Dockerfile | sort -u); do
    case "$base" in
      */*/*) qualified="$base" ;;
      */*) qualified="docker.io/$base" ;;
      *) qualified="docker.io/library/$base" ;;
    esac
    if buildah inspect --type image "$qualified" >/dev/null 2>&1; then
      echo "base image $qualified: in local storage"
    elif timeout 120 buildah pull --quiet "$qualified" >/dev/null 2>"${TMPDIR:-/tmp}/portcullis-pull.err"; then
      echo "base image $qualified: pulled"
    else
      echo "base image $qualified: no registry serves it ($(tail -1 "${TMPDIR:-/tmp}/portcullis-pull.err")); making it"
      deploy/base-image/build.sh "$qualified"
    fi
  done
  # npm's global npmrc for the RUN steps only (mounted over the image's empty /usr/local/etc: nothing of it
  # lands in the image): trust this machine's CAs (CI's egress goes through a TLS-inspecting proxy), and
  # build native addons against the headers the base image ships in /usr/local/include/node (node-gyp would
  # download them from nodejs.org, which CI does not reach).
  npm_etc="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-npm-etc.XXXXXX")"
  trap 'rm -rf "$npm_etc"' EXIT
  echo "nodedir=/usr/local" >"$npm_etc/npmrc"
  if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
    cp /etc/ssl/certs/ca-certificates.crt "$npm_etc/build-ca-certificates.crt"
    echo "cafile=/usr/local/etc/build-ca-certificates.crt" >>"$npm_etc/npmrc"
  fi
  chmod -R a+rX "$npm_etc"
  # --format docker: the OCI image format has no HEALTHCHECK, buildah would drop it. --network host: `npm ci`
  # and apt-get reach their registries the way this machine does. runc: crun refuses hybrid cgroups (v1 + v2).
  previous="$(buildah images --noheading --format '{{.ID}}' "$tag" 2>/dev/null || true)"
  buildah build --format docker --isolation "${BUILDAH_ISOLATION:-oci}" --runtime "${BUILDAH_RUNTIME:-runc}" \
    --network host --pull=false --layers=false --volume "$npm_etc:/usr/local/etc:ro" -t "$tag" .
  # The image this tag named before, now untagged: removed (unless a container still uses it).
  if [ -n "$previous" ] && [ "$previous" != "$(buildah images --noheading --format '{{.ID}}' "$tag")" ]; then
    buildah rmi "$previous" >/dev/null 2>&1 || true
  fi
fi
echo "built $tag with $engine in $((SECONDS - started)) s"

if [ "${PORTCULLIS_SKIP_RUN:-}" != 1 ]; then
  ENGINE="$engine" deploy/run-image.sh "$tag"
fi
