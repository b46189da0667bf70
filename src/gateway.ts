/**
 * buildGateway(config): a fastify instance whose HTTP server sends proxied paths down the lean gateway
 * pipeline and everything fastify owns (later: the authorization server) to fastify. Never listens itself.
 */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import type { Socket } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import type { GatewayConfig } from './config/schema.js'
import { parseSize } from './config/units.js'
import { configWarnings } from './config/lint.js'
import type { InvalidationSelector, RevocationCheck } from './authn/authenticator.js'
import type { KeySetStats } from './authn/jwks.js'
import type { CacheStats } from './authn/token-cache.js'
import { createAuthServer, type AuthServer } from './authserver/plugin.js'
import { Metrics } from './metrics/metrics.js'
import { HeadersTooLarge, MalformedRequest } from './errors/oauth-errors.js'
import { errorBody, errorHeaders, renderErrorOnSocket } from './errors/render.js'
import { GatewayPipeline } from './server/pipeline.js'
import { buildRuntime, closeRuntime, type RuntimeDependencies } from './server/runtime.js'

/** What the rest of Portcullis (revocation, metrics, the Redis broadcast) reaches through `app.gateway`. */
export interface GatewayHandle {
  /**
   * Hot reload: puts a new, already validated config in service (routes, scopes, issuers, caches' policies,
   * upstreams, forwarding, the TLS certificate, the log level). Throws, changing nothing, when it cannot be
   * applied; returns what it could not apply without a restart.
   */
  applyConfig(config: GatewayConfig): string[]
  /** Drops a token, or every token of a jti, subject or client, from the verified-JWT and introspection caches. */
  invalidate(selector: InvalidationSelector): number
  cacheStats(): CacheStats[]
  keySetStats(): KeySetStats[]
  /** The cache keys held now (hashes, never tokens). */
  cacheKeys(): string[]
}

declare module 'fastify' {
  interface FastifyInstance {
    gateway: GatewayHandle
    /** The embedded authorization server, when enabled (its context serves the browser pages and tests). */
    authServer: AuthServer | undefined
    /** The registry the admin listener serves on /metrics. */
    metrics: Metrics
  }
}

export interface GatewayOptions {
  /** Consulted on every authenticated request, cache hits included; true refuses the token as revoked. */
  isRevoked?: RevocationCheck
  /** Where the JSON log lines go (default stdout); tests capture them to assert what is never logged. */
  logStream?: NodeJS.WritableStream
  /** Milliseconds since the epoch; injected by tests to move time. */
  now?: () => number
  /** The metrics registry (a new one by default); a test may share one or turn process metrics off. */
  metrics?: Metrics
}

/** Sections a reload cannot change in a running process: they name sockets, or the server's own state. */
const RESTART_ONLY: ReadonlyArray<[string, (config: GatewayConfig) => unknown]> = [
  ['server.listen', (config) => config.server?.listen],
  ['server.max_header_size', (config) => config.server?.max_header_size],
  ['admin', (config) => config.admin],
  ['authorization_server', (config) => config.authorization_server],
  ['audit', (config) => config.audit],
]

/** Never logged: anything that can carry a credential. */
export const REDACTED_PATHS = ['req.headers.authorization', 'req.headers.cookie', 'req.headers["proxy-authorization"]']

function clientErrorResponse(error: NodeJS.ErrnoException, realm: string): string {
  const failure = error.code === 'HPE_HEADER_OVERFLOW' ? new HeadersTooLarge() : new MalformedRequest('malformed HTTP request')
  const body = errorBody(failure)
  const headers = { ...errorHeaders(failure, realm), 'content-length': String(Buffer.byteLength(body)), connection: 'close' }
  const head = Object.entries(headers).map(([name, value]) => `${name}: ${value}`).join('\r\n')
  return `HTTP/1.1 ${failure.status} ${failure.status === 431 ? 'Request Header Fields Too Large' : 'Bad Request'}\r\n${head}\r\n\r\n${body}`
}

export async function buildGateway(config: GatewayConfig, options: GatewayOptions = {}): Promise<FastifyInstance> {
  const tls = config.server?.tls
  const realm = config.server?.realm ?? 'portcullis'
  const maxHeaderSize = parseSize(config.server?.max_header_size ?? '16kb')
  // eslint-disable-next-line prefer-const -- the server built inside Fastify() refers to it; it is set right after
  let pipeline: GatewayPipeline | undefined
  // Paths fastify serves on the public listener (the embedded authorization server mounts here).
  const fastifyPaths = new Set<string>()

  const app = Fastify({
    logger: {
      level: config.log?.level ?? 'info',
      redact: REDACTED_PATHS,
      ...(options.logStream && { stream: options.logStream }),
    },
    serverFactory: (fastifyHandler) => {
      const handler = (req: http.IncomingMessage, res: http.ServerResponse) => {
        const url = req.url ?? ''
        const q = url.indexOf('?')
        if (fastifyPaths.size > 0 && fastifyPaths.has(q === -1 ? url : url.slice(0, q))) fastifyHandler(req, res)
        else pipeline!.handleRequest(req, res)
      }
      const server = tls
        ? https.createServer({
          cert: readFileSync(tls.cert_file),
          key: readFileSync(tls.key_file),
          minVersion: 'TLSv1.2',
          ALPNProtocols: ['http/1.1'],
          maxHeaderSize,
        }, handler)
        : http.createServer({ maxHeaderSize }, handler)
      server.on('upgrade', (req, socket, head) => pipeline!.handleUpgrade(req, socket, head))
      // CONNECT carries an authority-form target: this is no forward proxy, so refuse it in JSON.
      server.on('connect', (_req, socket: Socket) => {
        socket.on('error', () => socket.destroy())
        renderErrorOnSocket(socket, new MalformedRequest('the request target must be origin-form (/path)'), realm)
      })
      return server
    },
    clientErrorHandler: (error, socket: Socket) => {
      if (socket.writable) socket.end(clientErrorResponse(error, realm))
      else socket.destroy()
    },
  })

  const log = app.log
  for (const warning of configWarnings(config)) log.warn(warning)
  const now = options.now ?? Date.now
  const metrics = options.metrics ?? new Metrics()
  app.decorate('metrics', metrics)
  const authServer = config.authorization_server?.enabled
    ? await createAuthServer(app, config.authorization_server, { now, metrics })
    : undefined
  for (const path of authServer?.paths ?? []) fastifyPaths.add(path)
  app.decorate('authServer', authServer)
  const deps: RuntimeDependencies = { log, metrics, now, embedded: authServer?.embedded, isRevoked: options.isRevoked }
  pipeline = new GatewayPipeline(buildRuntime(config, deps))
  const authenticator = () => pipeline!.runtime.authenticator
  // A revocation at the embedded server reaches the gateway's caches at once (checklist RV-02, RT-04).
  if (authServer) authServer.ctx.revocations.onRevoke = (selector) => { authenticator().invalidate(selector) }
  metrics.bindGateway({ cacheStats: () => authenticator().cacheStats(), keySetStats: () => authenticator().keySetStats() })

  let current = config
  const applyConfig = (next: GatewayConfig): string[] => {
    const nextTls = next.server?.tls
    if (Boolean(nextTls) !== Boolean(tls)) throw new Error('server.tls cannot be turned on or off by a reload: restart')
    // Read before anything changes, so an unreadable certificate fails the reload as a whole.
    const secureContext = nextTls && { cert: readFileSync(nextTls.cert_file), key: readFileSync(nextTls.key_file) }
    const runtime = buildRuntime(next, deps, pipeline!.runtime)
    if (secureContext) (app.server as https.Server).setSecureContext(secureContext)
    pipeline!.swap(runtime)
    if (next.log?.level !== undefined) app.log.level = next.log.level
    for (const warning of configWarnings(next)) log.warn(warning)
    const needsRestart = RESTART_ONLY.filter(([, pick]) => JSON.stringify(pick(current)) !== JSON.stringify(pick(next))).map(([name]) => name)
    current = next
    return needsRestart
  }
  app.decorate('gateway', {
    applyConfig,
    invalidate: (selector) => authenticator().invalidate(selector),
    cacheStats: () => authenticator().cacheStats(),
    keySetStats: () => authenticator().keySetStats(),
    cacheKeys: () => authenticator().cacheKeys(),
  } satisfies GatewayHandle)

  // Before server.close(), which would otherwise wait for every upgraded socket to end by itself.
  app.addHook('preClose', async () => { pipeline!.closeUpgraded() })
  app.addHook('onClose', async () => {
    await Promise.all([closeRuntime(pipeline!.runtime), authServer?.close()])
  })
  return app
}
