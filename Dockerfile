# syntax=docker/dockerfile:1
# Portcullis container: multi-stage, runs as the unprivileged `node` user on the current Node.js LTS.

FROM node:26-bookworm-slim AS build
# better-sqlite3 is a native addon: it downloads a prebuilt binary when it can, and compiles otherwise.
RUN apt-get update && apt-get install -y --no-install-recommends python3 make g++ && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json tsconfig.json tsconfig.build.json ./
COPY src ./src
# `npm ci` runs the `prepare` script, which compiles src/ into dist/.
RUN npm ci && npm prune --omit=dev

FROM node:26-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root package.json ./
COPY --chown=root:root config ./config
# The SQLite store (signing keys, refresh tokens) lives here: mount a volume to keep it.
RUN mkdir -p /app/data && chown node:node /app/data
VOLUME ["/app/data"]
USER node
EXPOSE 8080
# Mount your own config (listen on 0.0.0.0:8080, with server.tls) over /app/config/portcullis.yaml.
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["start", "--config", "/app/config/portcullis.yaml"]
