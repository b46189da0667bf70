/**
 * buildGateway(config): a fastify instance whose HTTP server sends proxied paths down the lean gateway
 * pipeline and everything fastify owns (later: the authorization server) to fastify. Never listens itself.
 */
import { readFileSync } from 'node:fs'
import http from 'node:http'
import https from 'node:https'
import type { Socket } from 'node:net'
import Fastify, { type FastifyInstance } from 'fastify'
import pino from 'pino'
import { createAuditLog, type AuditLog } from '../audit/audit.js'
import type { GatewayConfig } from '../config/schema.js'
import { parseDuration, parseSize } from '../config/units.js'
import { configWarnings } from '../check/lint.js'
import type { InvalidationSelector, RevocationCheck } from '../authn/authenticator.js'
import type { KeySetStats } from '../authn/jwks.js'
import type { CacheStats } from '../authn/token-cache.js'
import { createAuthServer, type AuthServer, type AuthServerOptions } from '../authserver/plugin.js'
import { Metrics } from '../metrics/metrics.js'
import { MalformedRequest } from '../errors/oauth-errors.js'
import { clientErrorResponse, renderError, renderErrorOnSocket } from '../errors/render.js'
import { GatewayPipeline } from './pipeline.js'
import { requestHeadProblem } from './request-head.js'
import { buildRuntime, buildRuntimeInSlices, closeRuntime, type RuntimeDependencies } from './runtime.js'
import type { SharedBuckets } from '../ratelimit/shared.js'
import { setTracing, tracing, Tracing } from '../tracing/tracing.js'
import { DecisionEndpoint } from './decision.js'
import { createDecisionServer } from './decision-listener.js'
import { http2Limits, refusedOversized } from './http2.js'
import { createListener } from './listener.js'
import { LogOutput, RequestLog } from './log-output.js'
import { bufferedStdout, REDACTED_PATHS, RedactingLogController, serializeRequest } from './log-redaction.js'

export { loggableUrl, REDACTED_PATHS } from './log-redaction.js'

/** What the rest of Portcullis (revocation, metrics, the Redis broadcast) reaches through `app.gateway`. */
export interface GatewayHandle {
  /**
   * Hot reload: puts a new, already validated config in service (routes, scopes, issuers, caches' policies,
   * upstreams, forwarding, the TLS certificate, the log level). Rejects, changing nothing, when it cannot be
   * applied; resolves to what it could not apply without a restart. The new route table is compiled a slice at
   * a time, requests in flight being served between slices, and swapped in at once.
   */
  applyConfig(config: GatewayConfig): Promise<string[]>
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
    /** The audit trail (`audit.output`): security events, apart from the request log. */
    audit: AuditLog
    /** The decision endpoint's listener (`decision.listen`), not listening yet; undefined without `decision:`. */
    decisionServer: http.Server | undefined
  }
}

export interface GatewayOptions {
  /** Consulted on every authenticated request, cache hits included; true refuses the token as revoked. */
  isRevoked?: RevocationCheck
  /** Where the JSON log lines go (default stdout); tests capture them to assert what is never logged. */
  logStream?: NodeJS.WritableStream
  /** Where the audit lines go instead of `audit.output`. */
  auditStream?: NodeJS.WritableStream
  /** Milliseconds since the epoch; injected by tests to move time. */
  now?: () => number
  /** The metrics registry (a new one by default); a test may share one or turn process metrics off. */
  metrics?: Metrics
  /**
   * A worker under `server.workers`: its channel to the other workers, the primary's throttle counters and DPoP
   * proof marks, and the primary's rate-limit buckets (used with the memory store).
   */
  workers?: (NonNullable<AuthServerOptions['workers']> & { readonly rates: SharedBuckets }) | undefined
}

/** Sections a reload cannot change in a running process: they name sockets, or the server's own state. */
const RESTART_ONLY: ReadonlyArray<[string, (config: GatewayConfig) => unknown]> = [
  ['server.listen', (config) => config.server?.listen],
  ['server.max_header_size', (config) => config.server?.max_header_size],
  ['server.keep_alive_timeout', (config) => config.server?.keep_alive_timeout],
  ['server.workers', (config) => config.server?.workers],
  ['server.http2', (config) => config.server?.http2],
  // Whether the handshake asks for a certificate is the listener's, fixed when it is made.
  ['server.tls.client_certificates', (config) => config.server?.tls?.client_certificates],
  ['admin', (config) => config.admin],
  ['authorization_server', (config) => config.authorization_server],
  // The embedded server learns the resource identifiers clients may ask for (RFC 8707) at start.
  ['resources[].resource (for the embedded server)', (config) => config.authorization_server?.enabled && (config.resources ?? []).map((r) => r.resource)],
  ['audit', (config) => config.audit],
  ['tracing', (config) => config.tracing],
  ['decision.listen, decision.tls', (config) => config.decision && { listen: config.decision.listen, tls: config.decision.tls }],
  ['log.buffer', (config) => config.log?.buffer],
  ['log.flush_interval', (config) => config.log?.flush_interval],
]

export async function buildGateway(config: GatewayConfig, options: GatewayOptions = {}): Promise<FastifyInstance> {
  const tls = config.server?.tls
  const realm = config.server?.realm ?? 'portcullis'
  const maxHeaderSize = parseSize(config.server?.max_header_size ?? '16kb')
  // eslint-disable-next-line prefer-const -- the server built inside Fastify() refers to it; it is set right after
  let pipeline: GatewayPipeline | undefined
  // Paths fastify serves on the public listener (the embedded authorization server mounts here).
  const fastifyPaths = new Set<string>()

  // stdout, written synchronously: request lines come a turn's worth at a time (log-output.ts), so a write
  // is rare enough to need no worker thread, and nothing piles up in memory when stdout is slow.
  const buffered = options.logStream ? undefined : bufferedStdout(config.log)
  const logOutput = options.logStream
    ? new LogOutput(options.logStream)
    : buffered
      ? new LogOutput(buffered, true)
      // Unbuffered: the request lines go to the descriptor as bytes (log-output.ts), pino's own lines through its destination.
      : new LogOutput(pino.destination({ dest: 1, sync: true }), true, 1)
  const app = Fastify({
    logger: {
      level: config.log?.level ?? 'info',
      redact: REDACTED_PATHS,
      serializers: { req: serializeRequest },
      stream: logOutput,
    },
    logController: new RedactingLogController(),
    serverFactory: (fastifyHandler) => {
      const handler = (req: http.IncomingMessage, res: http.ServerResponse, expectsContinue = false) => {
        // HTTP/1.1's head is bounded by node's parser; an HTTP/2 header list here (http2.ts).
        if (req.httpVersionMajor === 2 && refusedOversized(req, res, maxHeaderSize)) return
        const url = req.url ?? ''
        const q = url.indexOf('?')
        if (fastifyPaths.size > 0 && fastifyPaths.has(q === -1 ? url : url.slice(0, q))) {
          const problem = requestHeadProblem(req)
          if (problem) return renderError(res, problem, { realm, close: true })
          // The authorization server authenticates its clients from the body: it may come at once.
          if (expectsContinue) res.writeContinue()
          fastifyHandler(req, res)
        } else {
          // The pipeline sends 100 Continue itself, once the request is authorized.
          pipeline!.handleRequest(req, res)
        }
      }
      const server = createListener({ tls, maxHeaderSize, http2: http2Limits(config) }, handler)
      // `server.keep_alive_timeout`: node's 5 s would close connections a load balancer still holds idle (AWS ALB:
      // 60 s), which then sees its next request on one fail (a 502 for its client). 75 s outlasts the common ones.
      server.keepAliveTimeout = parseDuration(config.server?.keep_alive_timeout ?? '75s')
      // `Expect: 100-continue`: node would answer 100 before anyone looked at the request.
      server.on('checkContinue', (req: http.IncomingMessage, res: http.ServerResponse) => handler(req, res, true))
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
  const audit = createAuditLog(config.audit, {
    now,
    ...(options.auditStream && { stream: options.auditStream }),
    onError: (error) => log.error({ err: error }, 'audit output failed'),
  })
  app.decorate('audit', audit)
  // Tracing: one provider for the process, from the config it started with (a reload cannot change it).
  const ownsTracing = config.tracing?.enabled === true && tracing() === null
  if (ownsTracing) setTracing(new Tracing(config.tracing!))
  const authServer = config.authorization_server?.enabled
    ? await createAuthServer(app, config.authorization_server, {
      now, metrics, audit, resources: (config.resources ?? []).map((resource) => resource.resource), dpop: config.dpop,
      workers: options.workers, allowInsecureHttp: config.server?.allow_insecure_http === true,
    })
    : undefined
  for (const path of authServer?.paths ?? []) fastifyPaths.add(path)
  app.decorate('authServer', authServer)
  // RFC 9449 §11.1 across instances: with a shared store (Redis), a proof is single use in all of them.
  const store = authServer?.ctx.store
  // With several workers and no such store, the primary keeps the marks for all of them.
  const sharedOnce = store?.firstUse !== undefined ? { firstUse: store.firstUse.bind(store) } : options.workers?.once
  const deps: RuntimeDependencies = { log, requestLog: new RequestLog(log, logOutput), metrics, now, embedded: authServer?.embedded, isRevoked: options.isRevoked, sharedOnce,
    sharedRates: options.workers?.rates,
    dpop: authServer && { config: config.dpop, settings: authServer.ctx.settings.dpop } }
  pipeline = new GatewayPipeline(buildRuntime(config, deps))
  const decisionServer = config.decision && createDecisionServer(config.decision, new DecisionEndpoint(pipeline), maxHeaderSize, realm)
  app.decorate('decisionServer', decisionServer)
  const authenticator = () => pipeline!.runtime.authenticator
  // A revocation at the embedded server reaches the gateway's caches at once (checklist RV-02, RT-04).
  if (authServer) {
    authServer.ctx.revocations.onRevoke = (selector) => { authenticator().invalidate(selector) }
    authServer.ctx.revocations.onResync = () => { authenticator().invalidate({ issuer: authServer.ctx.settings.issuer }) }
  }
  metrics.bindGateway({
    cacheStats: () => authenticator().cacheStats(), keySetStats: () => authenticator().keySetStats(),
    bodyMemoryBytes: () => pipeline!.runtime.bodyPolicy.memory.held,
  })

  let current = config
  const applyConfig = async (next: GatewayConfig): Promise<string[]> => {
    const nextTls = next.server?.tls
    if (Boolean(nextTls) !== Boolean(tls)) throw new Error('server.tls cannot be turned on or off by a reload: restart')
    // Read before anything changes, so an unreadable certificate fails the reload as a whole.
    const secureContext = nextTls && {
      cert: readFileSync(nextTls.cert_file), key: readFileSync(nextTls.key_file),
      // The CAs client certificates are checked against (tls_client_auth): replaced with the rest, never dropped.
      ...(nextTls.client_certificates === 'request' && nextTls.client_ca_file !== undefined && { ca: readFileSync(nextTls.client_ca_file) }),
    }
    const runtime = await buildRuntimeInSlices(next, deps, pipeline!.runtime)
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
  // Decisions in flight finish; idle keep-alive connections from the proxy close now.
  if (decisionServer) {
    app.addHook('onClose', async () => {
      if (!decisionServer.listening) return
      const closed = new Promise<void>((resolve) => decisionServer.close(() => resolve()))
      decisionServer.closeIdleConnections()
      await closed
    })
  }
  app.addHook('onClose', async () => {
    // Spans still queued are sent before the process goes (bounded by the exporter's own timeout).
    const tracer = tracing()
    if (tracer !== null && ownsTracing) {
      setTracing(null)
      await tracer.shutdown().catch((error: unknown) => log.warn({ err: error }, 'flushing traces failed'))
    }
    await Promise.all([closeRuntime(pipeline!.runtime), authServer?.close()])
    await audit.close()
    logOutput.close()
  })
  return app
}
