# syntax=docker/dockerfile:1

# Build: install every dependency and compile TypeScript to dist/.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
# Sources only: .dockerignore keeps tests, logs and local builds out of the context.
COPY . .
# The image's own Node 24 compiles: the `node` development package (Node for machines with an older
# system Node) is not installed without its scripts, so npm's PATH is not used here.
RUN node node_modules/typescript/bin/tsc -p tsconfig.build.json

# Runtime: production dependencies only, run as the unprivileged node user.
FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    LOG_DIR=/app/logs
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && npm cache clean --force
COPY --from=build /app/dist ./dist
COPY migrations ./migrations
COPY public ./public
COPY docs/runbooks ./docs/runbooks
RUN mkdir -p /app/logs && chown node:node /app/logs
USER node
EXPOSE 3000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health/live').then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# Run node directly (not npm) so SIGTERM reaches the service and it drains gracefully.
CMD ["node", "dist/server.js"]
