/**
 * The decision endpoint (`decision`): the proxy a team already runs (nginx `auth_request`, ingress-nginx
 * `auth-url`, Traefik and Caddy forward auth, Envoy `ext_authz`) asks, per request, whether to forward it. The
 * same stages as the proxy mode judge the request it describes (src/server/stages.ts). Allowed: 200 with the
 * identity headers, for the proxy to copy upstream, and how long the proxy may cache that answer. Refused: the
 * status, challenge and body the proxy mode would answer, never cacheable. No body is read.
 */
import { performance } from 'node:perf_hooks'
import type { IncomingMessage, ServerResponse } from 'node:http'
import { hasBody } from '../forward/request-body.js'
import { openExchange, runStages } from './exchange.js'
import { refuse } from './refuse.js'
import { recordRequest } from './request-record.js'
import type { GatewayRuntime } from './runtime.js'
import type { StageLists } from './stages.js'

export class DecisionEndpoint {
  constructor(private readonly source: { readonly runtime: GatewayRuntime; readonly stages: StageLists }) {}

  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const rt = this.source.runtime
    const stages = this.source.stages.decision
    const started = performance.now()
    const ex = openExchange(rt, req, res, 'decision')
    rt.inflight++
    // A decision reads no body: one that comes anyway is not read either, and the connection ends with the answer.
    if (hasBody(req)) res.shouldKeepAlive = false
    res.on('close', () => {
      if (--rt.inflight === 0) rt.onIdle?.()
      recordRequest(rt, req, res, ex, (performance.now() - started) / 1000)
    })
    try {
      runStages(stages, ex)?.catch((error: unknown) => refuse(ex, error))
    } catch (error) {
      refuse(ex, error)
    }
  }
}
