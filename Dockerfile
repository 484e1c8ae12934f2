# syntax=docker/dockerfile:1
#
# The agent-operator container image.
#
#   docker build -t ghcr.io/agentcompute/agent-operator:0.1.0 \
#     --build-arg REVISION=$(git rev-parse HEAD) --build-arg CREATED=$(date -u +%FT%TZ) .
#
# build:   every dependency, `npm run build` (tsc: src/ -> dist/)
# deps:    production dependencies only, without the optional one (@kubernetes/client-node,
#          ~80 MB with what it pulls in: only a kubeconfig user with a legacy auth-provider
#          needs it, never a pod with its ServiceAccount)
# runtime: Node + dist/ + production node_modules + package.json + crds/ (the CRDs of this
#          image's version, for whoever extracts them; the operator reads none); no npm and no
#          compiler, on Debian slim (which has a shell and dpkg: it is not distroless); runs as
#          UID 65532 on a read-only root filesystem (it writes nothing; mount an emptyDir at
#          /tmp as manifests/ does).
#
# Node: the same major and version the project pins through its `node` devDependency (see
# test/e2e/install/image.test.ts, which keeps the two in step). That devDependency only makes
# npm scripts run on Node 24 on a developer machine; the image IS Node 24, so it is neither
# installed here (--ignore-scripts leaves it out) nor needed at runtime (--omit=dev).
ARG NODE_VERSION=24.21.0

FROM node:${NODE_VERSION}-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
# --ignore-scripts: no dependency runs code at install time; the build needs none (tsc only).
RUN --mount=type=cache,target=/root/.npm npm ci --ignore-scripts --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

FROM node:${NODE_VERSION}-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund

FROM node:${NODE_VERSION}-bookworm-slim AS runtime
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="agent-operator" \
      org.opencontainers.image.description="Kubernetes operator that keeps the Agent Registry and Compute Service in line with custom resources" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/agentcompute/agent-operator" \
      org.opencontainers.image.url="https://github.com/agentcompute/agent-operator" \
      org.opencontainers.image.documentation="https://github.com/agentcompute/agent-operator#readme" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.vendor="agentcompute"
# The operator is started with `node`; npm, npx, corepack and yarn would only be attack surface.
RUN rm -rf /usr/local/lib/node_modules /usr/local/bin/npm /usr/local/bin/npx /usr/local/bin/corepack \
      /usr/local/bin/yarn /usr/local/bin/yarnpkg /opt/yarn-*
ENV NODE_ENV=production
WORKDIR /app
# Owned by root and not writable by the operator's user: the process cannot change its own code.
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist ./dist
COPY package.json ./
COPY crds ./crds
# A numeric UID/GID (no passwd entry needed) so that runAsNonRoot can verify it.
USER 65532:65532
# 8080: /metrics; 8081: /healthz and /readyz.
EXPOSE 8080 8081
# Node runs as PID 1: the kernel delivers only the signals a process handles, and the
# operator handles SIGTERM and SIGINT (graceful shutdown: in-flight reconciles finish within
# --graceful-shutdown-timeout, the leader Lease is released, Events are flushed; exit 0).
# A second signal exits at once. It spawns no child processes, so there is nothing to reap;
# `docker run --init` is optional.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "dist/cli.js"]
CMD ["run"]
