/**
 * The decision endpoint (`decision`): the proxy a team already runs (nginx `auth_request`, ingress-nginx
 * `auth-url`, Traefik and Caddy forward auth, Envoy `ext_authz`) asks, per request, whether to forward it. The
 * same stages as the proxy mode judge the request it describes (src/server/stages.ts). Allowed: 200 with the
 * identity headers, for the proxy to copy upstream, and how long the proxy may cache that answer. Refused: the
 * status, challenge and body the proxy mode would answer, never cacheable. No body is read.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { hasBody } from '../forward/request-body.js'
import { shed } from './admission.js'
import { serveStages } from './refuse.js'
import { beginRequest } from './request-record.js'
import type { GatewayRuntime } from './runtime.js'
import type { StageLists } from './stages.js'

export class DecisionEndpoint {
  constructor(private readonly source: { readonly runtime: GatewayRuntime; readonly stages: StageLists }) {}

  readonly handleRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const stages = this.source.stages.decision
    const rt = this.source.runtime
    // `server.admission`: the proxy in front gets 503 and passes it on (nginx `auth_request` as a 500).
    if (rt.waiting.count >= rt.admission.limit) return shed(req, res, rt)
    const ex = beginRequest(rt, req, res, 'decision')
    // A decision reads no body: one that comes anyway is not read either, and the connection ends with the answer.
    if (hasBody(req)) res.shouldKeepAlive = false
    // `tracing`: each decision is one server span (serveStages), named by the request it describes once matched.
    serveStages(stages, ex)
  }
}
