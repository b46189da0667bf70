/**
 * The public listener's requests through the stages of src/server/stages.ts, on the raw node:http request so the
 * hot path pays for nothing it does not use (the authorization server and admin routes stay fastify routes).
 * A runtime is swapped in whole on reload; requests in flight finish on the one they started with.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Duplex } from 'node:stream'
import { BadGateway, GatewayError, MalformedRequest, ServerError } from '../errors/oauth-errors.js'
import { renderErrorOnSocket } from '../errors/render.js'
import { upstreamFailure } from '../forward/proxy.js'
import { openExchange, runStages, type Exchange, type Stage } from './exchange.js'
import { shed } from './admission.js'
import { serveStages } from './refuse.js'
import { requestHeadProblem } from './request-head.js'
import { beginRequest } from './request-record.js'
import { retireWhenIdle, type GatewayRuntime } from './runtime.js'
import { runProxy, stagesFor, type StageLists } from './stages.js'
import { upstreamHeaders } from './stages/forward.js'
import { readTarget } from './stages/route.js'

export type { GatewayRuntime } from './runtime.js'

export class GatewayPipeline {
  private readonly upgraded = new Set<Duplex>()

  /** The stages of each mode for `rt`: a stage the runtime's config does not need is not in them. */
  private lists: StageLists

  constructor(private rt: GatewayRuntime) {
    this.lists = stagesFor(rt)
  }

  /** The runtime new requests use. */
  get runtime(): GatewayRuntime {
    return this.rt
  }

  /** The stage lists new requests run, the runtime's. */
  get stages(): StageLists {
    return this.lists
  }

  /**
   * Puts `next` in service for every request that starts from now on; the requests in flight finish on
   * the old one, which then closes what `next` does not reuse.
   */
  swap(next: GatewayRuntime): void {
    const previous = this.rt
    this.rt = next
    this.lists = stagesFor(next)
    retireWhenIdle(previous, next)
  }

  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const rt = this.rt
    // `server.admission`: past the limit, shed before any stage runs.
    if (rt.waiting.count >= rt.admission.limit) return shed(req, res, rt)
    serveStages(this.lists.proxy, beginRequest(rt, req, res, 'proxy'), runProxy)
  }

  private logUpgradeFailure(rt: GatewayRuntime, req: IncomingMessage, failure: GatewayError): void {
    const entry = { method: req.method, status: failure.status, error: failure.code, reason: failure.internal.detail ?? failure.description }
    if (failure.status >= 500) rt.log.error({ ...entry, err: failure.internal.cause }, 'upgrade failed')
    else rt.log.info(entry, 'upgrade denied')
  }

  /** WebSocket upgrades: forwarded only after the same route match and token validation. */
  readonly handleUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    socket.on('error', () => socket.destroy())
    const rt = this.rt
    const ex = openExchange(rt, req, null, 'upgrade')
    this.upgrade(ex, this.lists.upgrade, socket, head).catch((error: unknown) => {
      const failure = error instanceof GatewayError ? error : new ServerError(error)
      this.logUpgradeFailure(rt, req, failure)
      renderErrorOnSocket(socket, failure, rt.realm, ex.resourceMetadata)
    })
  }

  private async upgrade(ex: Exchange, stages: readonly Stage[], socket: Duplex, head: Buffer): Promise<void> {
    const { rt, req } = ex
    if (req.headers.upgrade?.toLowerCase() !== 'websocket') throw new MalformedRequest('only WebSocket upgrades are forwarded')
    // RFC 6455 §4.1: the opening handshake is a GET over HTTP/1.1 or later. Forwarded as anything else, an
    // OPTIONS or POST upgrade would match that method's (perhaps anonymous) route and reach the GET one's.
    const problem = requestHeadProblem(req)
    if (problem) throw problem
    if (req.method !== 'GET') throw new MalformedRequest('a WebSocket upgrade must be a GET request')
    if (req.httpVersionMajor === 1 && req.httpVersionMinor === 0) throw new MalformedRequest('a WebSocket upgrade needs HTTP/1.1')
    readTarget(ex, req.url ?? '')
    await runStages(stages, ex)
    const headers = upstreamHeaders(ex)
    const upstream = rt.upstreams.get(ex.rule.upstream)!
    if (!upstream.pool) throw new BadGateway(`upstream ${upstream.name} does not accept WebSocket upgrades`)
    let upgraded
    try {
      upgraded = await upstream.pool.upgrade({ path: req.url!, method: 'GET', headers, protocol: 'websocket' })
    } catch (error) {
      throw upstreamFailure(error, upstream.name)
    }
    const upstreamSocket = upgraded.socket
    if (socket.destroyed) { upstreamSocket.destroy(); return }
    let head101 = 'HTTP/1.1 101 Switching Protocols\r\n'
    for (const [name, value] of Object.entries(upgraded.headers)) {
      for (const item of Array.isArray(value) ? value : [value]) if (item !== undefined) head101 += `${name}: ${item}\r\n`
    }
    socket.write(head101 + '\r\n')
    if (head.length > 0) upstreamSocket.write(head)
    this.upgraded.add(socket)
    const close = () => {
      this.upgraded.delete(socket)
      socket.destroy()
      upstreamSocket.destroy()
    }
    upstreamSocket.on('error', close).on('close', close)
    socket.on('close', close)
    upstreamSocket.pipe(socket)
    socket.pipe(upstreamSocket)
  }

  /** Upgraded sockets are not the HTTP server's any more: close them ourselves on shutdown. */
  closeUpgraded(): void {
    for (const socket of this.upgraded) socket.destroy()
    this.upgraded.clear()
  }
}
