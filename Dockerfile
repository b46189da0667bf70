# syntax=docker/dockerfile:1
# Portcullis container: multi-stage, on the current Node.js LTS, runs as the unprivileged `node` user (1000).
# deploy/build-image.sh builds it (docker, or buildah) and runs it; test/e2e/container.test.ts replays these steps
# outside any engine: keep one instruction per line, exec-form (JSON) ENTRYPOINT, CMD and HEALTHCHECK, and no
# line continuations.

# Compiles src/ into dist/ (the TypeScript compiler and the other dev dependencies stay in this stage).
FROM node:26-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY scripts ./scripts
COPY src ./src
RUN npm ci --ignore-scripts && npm run build

# Production dependencies only. `--ignore-scripts` skips our own `prepare` (a build, which needs the dev
# dependencies); better-sqlite3 is a native addon whose install script fetches a prebuilt binary, or
# compiles one with the tools below, so it is rebuilt with its scripts.
FROM node:26-bookworm-slim AS deps
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm rebuild better-sqlite3
# At run time only the addon itself is loaded: not SQLite's sources nor the compiler's objects (26 MB).
RUN cd node_modules/better-sqlite3 && rm -rf deps src build/Release/obj build/Release/obj.target build/Release/.deps build/Release/sqlite3.a build/Release/test_extension.node

FROM node:26-bookworm-slim
ENV NODE_ENV=production
# No NODE_OPTIONS=--max-semi-space-size=64 here (src/server/young-generation.ts): it pays on node 20 only; on node 26
# it measured no gain (docs/deployment.md).
# `portcullis start`, `check` and `keys rotate` read this file when no --config is given.
ENV PORTCULLIS_CONFIG=/etc/portcullis/portcullis.yaml
WORKDIR /app
# Everything is owned by root: the process can read its code and config, and write nowhere but the volume.
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
# A demo config (config/portcullis.yaml with container listeners and store): mount your own over /etc/portcullis.
COPY config/docker.yaml /etc/portcullis/portcullis.yaml
COPY config/dev/jwks.json /etc/portcullis/dev/jwks.json
# The SQLite store (signing keys, refresh tokens): mount a volume here to keep it across containers.
RUN mkdir -p /var/lib/portcullis && chown 1000:1000 /var/lib/portcullis
VOLUME ["/var/lib/portcullis"]
# Numeric, so that Kubernetes' runAsNonRoot can verify it (1000 is `node` in the official images).
USER 1000:1000
EXPOSE 8080 9090
# The admin listener's liveness endpoint; there is no curl in slim images, node has fetch.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 CMD ["node", "-e", "fetch('http://127.0.0.1:9090/healthz').then((res) => process.exit(res.status === 200 ? 0 : 1), () => process.exit(1))"]
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["start"]
