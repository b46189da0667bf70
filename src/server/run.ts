/**
 * A running Portcullis: the public listener, the admin listener, hot reload (SIGHUP, and the config
 * file changing on disk) and graceful shutdown (SIGTERM, SIGINT). `portcullis start` is this; tests
 * start it in-process or as the CLI.
 */
import { readFileSync, watch, type FSWatcher } from 'node:fs'
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Http2Session } from 'node:http2'
import type { Socket } from 'node:net'
import { Server as TlsServer } from 'node:tls'
import path from 'node:path'
import type { FastifyInstance } from 'fastify'
import { ConfigError, configDigest, loadConfig } from '../check/load.js'
import { ConfigLoader, readForReload, routeKeySteps, UnreadableConfig } from '../check/load-off-thread.js'
import { runInSlices } from '../common/slices.js'
import { collectAll } from '../common/young-collection.js'
import type { GatewayConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { parseListen } from '../config/listen.js'
import { buildGateway, type GatewayOptions } from './gateway.js'
import { buildAdmin } from './admin.js'
import { isHttp2Socket } from './http2.js'

/** Editors write a file in several steps, and a ConfigMap update swaps symlinks: wait for the dust. */
const WATCH_DEBOUNCE_MS = 250

export interface RunningPortcullis {
  readonly gateway: FastifyInstance
  readonly admin: FastifyInstance | undefined
  /** The config in service now. */
  config(): GatewayConfig
  /** Re-reads the file and applies it; false (old config kept) when it is invalid or cannot be applied. */
  reload(trigger?: string): Promise<boolean>
  /**
   * Stops accepting and closes the connections without a request in flight; the requests in flight get up to
   * `server.shutdown_timeout` to finish (answered with `Connection: close`); then closes the store.
   */
  shutdown(signal?: string): Promise<void>
}

export interface RunOptions extends GatewayOptions {
  env?: NodeJS.ProcessEnv
  /** Ports to listen on instead of the config's (tests: 0). */
  port?: number
  adminPort?: number
  decisionPort?: number
  /** Watch the config file and reload on change (default true). */
  watch?: boolean
  /** A worker under `server.workers`: the primary serves the admin listener for all of them. */
  worker?: boolean
  /** The file as `portcullis start` already read and loaded it (cli-start.ts): served without loading it again. */
  loaded?: LoadedConfig | undefined
}

/** A config file's text and the config it loaded to. */
export interface LoadedConfig {
  readonly text: string
  readonly config: GatewayConfig
}

/**
 * The response node's HTTP/1.1 server is writing on `socket`, if any: node keeps it as `socket._httpMessage` from
 * the request until the response has finished (and clears it then), as graceful-shutdown libraries read it
 * (http-terminator); undefined on an idle connection.
 */
function responseUnderWay(socket: Socket): ServerResponse | undefined {
  return (socket as Socket & { _httpMessage?: ServerResponse | null })._httpMessage ?? undefined
}

/** How often a draining server closes the connections that have gone idle. */
const DRAIN_TICK_MS = 100

/**
 * A listener's connections, for a shutdown that waits for requests, not for connections. Node's
 * closeIdleConnections() closes a keep-alive connection between two requests, but not one that has not sent
 * a request yet (a browser's preconnect): server.close() would wait for that one until the shutdown timeout.
 */
function trackConnections(server: Server) {
  const secure = server instanceof TlsServer
  /**
   * Per socket that carries HTTP (with TLS, the TLS socket): whether it has sent a request. Not the response itself:
   * kept until the next request or the close, that held about 2 KB per idle keep-alive connection (performance.md).
   */
  const hasServed = new Map<Socket, boolean>()
  /** TCP connections whose TLS handshake is not done yet, by remote address: no HTTP socket exists for them. */
  const handshaking = new Map<string, Socket>()
  const remote = (socket: Socket) => `${socket.remoteAddress}|${socket.remotePort}`
  let draining = false
  // One listener shared by every socket (`this` is the socket), not a closure and a once() wrapper per connection:
  // about 0.2 KB less per idle keep-alive connection (performance.md, connections).
  function forget(this: Socket) { hasServed.delete(this) }
  const track = (socket: Socket) => {
    hasServed.set(socket, false)
    socket.on('close', forget)
  }
  server.on('connection', (socket: Socket) => {
    if (!secure) return track(socket)
    const key = remote(socket)
    handshaking.set(key, socket)
    socket.once('close', () => { if (handshaking.get(key) === socket) handshaking.delete(key) })
  })
  server.on('secureConnection', (socket: Socket) => {
    handshaking.delete(remote(socket))
    track(socket)
  })
  // First of the 'request' listeners, so that no answer is under way yet. Per request: one Map read (a write on a connection's first), no closure.
  const onRequest = (req: IncomingMessage, res: ServerResponse) => {
    if (hasServed.get(req.socket) === false) hasServed.set(req.socket, true)
    // RFC 9112 §9.6: an answer that starts while draining says `Connection: close`; node ends the socket after it.
    if (draining) res.shouldKeepAlive = false
  }
  server.prependListener('request', onRequest)
  // `Expect: 100-continue` requests come as 'checkContinue' instead (gateway.ts answers them).
  server.prependListener('checkContinue', onRequest)
  // HTTP/2 (server.http2): a session ends gracefully with GOAWAY (RFC 9113 §6.8), its open streams finishing.
  const sessions = new Set<Http2Session>()
  server.on('session', (session: Http2Session) => {
    sessions.add(session)
    session.once('close', () => sessions.delete(session))
    if (draining) session.close()
  })
  const closeIdle = () => {
    server.closeIdleConnections()
    for (const [socket, served] of hasServed) if (!served && !isHttp2Socket(socket)) socket.destroy()
    for (const socket of handshaking.values()) socket.destroy()
  }
  return {
    /** Closes the connections without a request in flight, now and every tick after; answers under way end with Connection: close. */
    drain(): NodeJS.Timeout {
      draining = true
      for (const [socket, served] of hasServed) {
        const res = served ? responseUnderWay(socket) : undefined
        if (res && !res.headersSent) res.shouldKeepAlive = false
      }
      for (const session of sessions) session.close()
      closeIdle()
      return setInterval(closeIdle, DRAIN_TICK_MS)
    },
    /** Past the shutdown timeout: every connection, HTTP/2 sessions with streams still open included. */
    closeAll(): void {
      server.closeAllConnections()
      for (const session of sessions) session.destroy()
    },
  }
}

/** Whether the file still holds the text of this digest. */
function servedFileUnchanged(file: string, digest: string): boolean {
  try {
    return readForReload(file).digest === digest
  } catch {
    return false
  }
}

/** Loads `file`, builds and starts everything; throws ConfigError for a bad file. */
export async function runPortcullis(file: string, options: RunOptions = {}): Promise<RunningPortcullis> {
  const env = options.env ?? process.env
  const text = options.loaded?.text ?? readFileSync(file, 'utf8')
  // The event loop compiles its validator rather than taking the written one (LoadOptions.writtenValidator).
  let config = options.loaded?.config ?? loadConfig(file, text, env, { writtenValidator: false })
  // The config in service is known by its digest: a reload reads the file on the loader's thread (load-off-thread.ts).
  let digest = configDigest(text)
  // And its routes by theirs (a reload hands a route that did not change back as the object in service, whose rule is
  // kept): those of the start's config are taken a slice at a time once serving (about 60 ms for 10,000 routes); a
  // reload before then compiles every route.
  let keys: Uint8Array | undefined
  const gateway = await buildGateway(config, options)
  const log = gateway.log.child({ component: 'lifecycle' })
  const listeners = [trackConnections(gateway.server)]
  gateway.metrics.setConfig(digest, Date.now())
  // Built at once, the config and its tables sit in the young generation, and the first scavenges after start
  // would copy them twice (58 and 27 ms with 10,000 routes, --trace-gc; the first two a reload asks for, or two
  // while serving): promoted by one full collection now, before anything is served.
  collectAll()
  const listen = parseListen(config.server?.listen ?? '127.0.0.1:8080')
  await gateway.listen({ host: listen.host, port: options.port ?? listen.port })
  const first = config
  void runInSlices(routeKeySteps(first.routes)).then((made) => { if (config === first) keys = made },
    (error: unknown) => log.warn({ err: error }, 'route keys not taken: every reload compiles every route'))
  const decisionServer = gateway.decisionServer
  if (decisionServer && config.decision) {
    listeners.push(trackConnections(decisionServer))
    const at = parseListen(config.decision.listen)
    try {
      await new Promise<void>((resolve, reject) => {
        decisionServer.once('error', reject)
        decisionServer.listen(options.decisionPort ?? at.port, at.host, () => { decisionServer.off('error', reject); resolve() })
      })
    } catch (error) {
      await gateway.close()
      throw error
    }
  }
  let admin: FastifyInstance | undefined
  if (config.admin?.listen !== undefined && !options.worker) {
    try {
      admin = await buildAdmin(gateway, () => config)
      listeners.push(trackConnections(admin.server))
      const at = parseListen(config.admin.listen)
      await admin.listen({ host: at.host, port: options.adminPort ?? at.port })
    } catch (error) {
      // The public listener is open already: a half-started process must not stay up.
      await Promise.all([admin?.close(), gateway.close()])
      throw error
    }
  }

  // A large route table's next reload finds its loader thread started (load-off-thread.ts).
  const loader = new ConfigLoader()
  loader.keepAheadFor(config)

  let reloading: Promise<boolean> = Promise.resolve(true)
  const reloadNow = async (trigger: string): Promise<boolean> => {
    try {
      // Read, parsed and checked off the event loop: a large file takes long enough that requests would wait for it.
      // A watch event for a file that did not change (a touch, a second event of one save) is no reload.
      const began = performance.now()
      const served = keys === undefined ? undefined : { configs: config.routes, keys }
      const reloaded = await loader.load(file, env, { digest: trigger === 'watch' ? digest : undefined, routes: served })
      if (reloaded.config === undefined) {
        log.debug({ trigger }, 'config file unchanged; nothing to reload')
        return true
      }
      const loaded = performance.now()
      const { config: next, digest: nextDigest } = reloaded
      const needsRestart = await gateway.gateway.applyConfig(next)
      // How long each part took: parsed and checked on the loader thread, then built a slice at a time and swapped in.
      const took = { load_ms: Math.round(loaded - began), build_ms: Math.round(performance.now() - loaded) }
      config = next
      digest = nextDigest
      keys = reloaded.keys
      gateway.metrics.configReloads.inc({ result: 'success' })
      gateway.audit.emit('config.reloaded', { trigger, sha256: digest, needs_restart: needsRestart })
      gateway.metrics.setConfig(digest, Date.now())
      log.info({ trigger, sha256: digest, ...took }, 'config reloaded')
      if (needsRestart.length > 0) log.warn({ keys: needsRestart }, `config reloaded; these changes need a restart: ${needsRestart.join(', ')}`)
      return true
    } catch (error) {
      gateway.metrics.configReloads.inc({ result: 'failure' })
      if (error instanceof UnreadableConfig) {
        gateway.audit.emit('config.reload_failed', { trigger, reason: 'unreadable', problems: 1 })
        log.error({ trigger, err: error }, `config reload failed: cannot read ${file}; keeping the config in service`)
        return false
      }
      // Every problem on its own line, with file:line:col, as `portcullis check` prints them.
      const problems = error instanceof ConfigError ? error.message.split('\n') : [error instanceof Error ? error.message : String(error)]
      gateway.audit.emit('config.reload_failed',
        { trigger, reason: error instanceof ConfigError ? 'invalid' : 'rejected', problems: problems.length })
      for (const problem of problems) log.error({ trigger }, `config reload failed: ${problem}`)
      log.error({ trigger, problems: problems.length }, 'config reload failed; keeping the config in service')
      return false
    } finally {
      loader.keepAheadFor(config)
    }
  }
  // One reload at a time, in order: a SIGHUP during a watch-triggered reload waits for it.
  const reload = (trigger = 'api') => (reloading = reloading.then(() => reloadNow(trigger)))

  let watcher: FSWatcher | undefined
  let debounce: NodeJS.Timeout | undefined
  if (options.watch ?? true) {
    // The directory, not the file: an editor's rename-over and a Kubernetes ConfigMap's `..data` symlink
    // swap replace the file, and a watch on the old inode would go quiet.
    watcher = watch(path.dirname(path.resolve(file)), () => {
      clearTimeout(debounce)
      debounce = setTimeout(() => { void reload('watch') }, WATCH_DEBOUNCE_MS)
    })
    watcher.on('error', (error) => log.warn({ err: error }, 'config file watch failed; reload with SIGHUP'))
    // A change saved after the file was read (`portcullis start` reads it before loading the server's modules and
    // building the gateway) and before this watch: read once more here, and reloaded only when it changed (or
    // cannot be read: the reload says so).
    if (!servedFileUnchanged(file, digest)) void reload('watch')
  }

  let stopping: Promise<void> | undefined
  const shutdown = (signal = 'api') => (stopping ??= (async () => {
    const timeoutMs = parseDuration(config.server?.shutdown_timeout ?? '10s')
    log.info({ signal, timeoutMs }, 'shutting down: draining requests in flight')
    watcher?.close()
    clearTimeout(debounce)
    // Connections without a request in flight close now, the others as their last answer ends; past the
    // timeout, all do.
    const ticks = listeners.map((listener) => listener.drain())
    const force = setTimeout(() => {
      log.warn('shutdown timeout: closing the connections still open')
      for (const listener of listeners) listener.closeAll()
    }, timeoutMs)
    try {
      await Promise.all([gateway.close(), admin?.close(), loader.close()])
    } finally {
      for (const tick of ticks) clearInterval(tick)
      clearTimeout(force)
    }
    log.info('shut down')
  })())

  return { gateway, admin, config: () => config, reload, shutdown }
}
