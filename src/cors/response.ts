/**
 * CORS headers on the answers to actual requests. A forwarded response, on a route where the gateway
 * answers CORS: the upstream's own `Access-Control-*` headers go (one answer, the gateway's), `Origin` joins its
 * `Vary` (once), and the gateway's headers follow. A refusal the gateway writes: its route's headers, or the
 * top-level policy's when no route was found.
 */
import type { IncomingMessage } from 'node:http'
import { corsAnswer, type CorsAnswer, type CorsRuntime } from './policy.js'
import { isPreflight } from './preflight.js'

/** Whether a `Vary` value already covers `Origin` (`*` covers everything). */
function variesOnOrigin(value: string): boolean {
  for (const part of value.split(',')) {
    const token = part.trim().toLowerCase()
    if (token === 'origin' || token === '*') return true
  }
  return false
}

/** `list` as responseHeaderList() makes it (lower-case names, repeated fields apart), with `answer` applied. */
export function withCorsHeaders(list: readonly string[], answer: CorsAnswer): string[] {
  const out: string[] = []
  let lastVary = -1
  let covered = false
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!
    if (name.startsWith('access-control-')) continue
    const value = list[i + 1]!
    if (name === 'vary') {
      lastVary = out.length + 1
      covered ||= variesOnOrigin(value)
    }
    out.push(name, value)
  }
  if (!covered) {
    if (lastVary === -1) out.push('vary', 'Origin')
    else out[lastVary] = out[lastVary]!.trim() === '' ? 'Origin' : `${out[lastVary]}, Origin`
  }
  for (let i = 0; i < answer.list.length; i++) out.push(answer.list[i]!)
  return out
}

/**
 * The CORS headers of a refusal the gateway renders: its route's (`decided`, null for none), or, when it came
 * before a route was found (404, 405, a bad path), the top-level policy's. A refused preflight gets none.
 */
export function refusalCors(cors: CorsRuntime, req: IncomingMessage, decided: CorsAnswer | null | undefined): Readonly<Record<string, string>> | undefined {
  if (decided !== undefined) return decided?.headers
  const origin = req.headers.origin
  if (origin === undefined || isPreflight(req)) return undefined
  return corsAnswer(cors.fallback, origin, req.method)?.headers
}
