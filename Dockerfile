# syntax=docker/dockerfile:1
# Portcullis container: multi-stage, runs as the unprivileged `node` user on the current Node.js LTS.

FROM node:26-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# Scripts are skipped here because `prepare` builds from src/, which is copied next.
RUN npm ci --ignore-scripts
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build && npm prune --omit=dev

FROM node:26-bookworm-slim
ENV NODE_ENV=production
WORKDIR /app
COPY --from=build --chown=root:root /app/node_modules ./node_modules
COPY --from=build --chown=root:root /app/dist ./dist
COPY --chown=root:root package.json ./
COPY --chown=root:root config ./config
USER node
EXPOSE 8080
# Mount your own config (listen on 0.0.0.0:8080, with server.tls) over /app/config/portcullis.yaml.
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["start", "--config", "/app/config/portcullis.yaml"]
