/**
 * What the logs may show of a request (never a credential: `log`, docs/operations.md) and where the lines go.
 */
import { LogController, type FastifyRequest } from 'fastify'
import pino from 'pino'
import type { GatewayConfig } from '../config/schema.js'
import { parseDuration, parseSize } from '../config/units.js'

/**
 * `log.buffer`: stdout lines are held back until `buffer` bytes have gathered or `flush_interval` (default
 * 1s) has passed, then written at once: one write per batch instead of one per request line. Written out when
 * the gateway closes and when the process exits (LogOutput); a crash that kills the process outright loses
 * what is held.
 */
export function bufferedStdout(log: GatewayConfig['log']): pino.DestinationStream | undefined {
  const size = log?.buffer === undefined ? 0 : parseSize(log.buffer)
  if (size === 0) return undefined
  return pino.destination({
    // maxWrite just over the buffer: the pending text pino's destination measures per line stays this small.
    dest: 1, sync: true, minLength: size, maxWrite: size + 1024, periodicFlush: parseDuration(log?.flush_interval ?? '1s'),
  })
}

const CREDENTIAL_HEADERS = ['authorization', 'proxy-authorization', 'cookie', 'set-cookie']
/** Form and query parameters that are credentials (`code` only inside a request's parts: `err.code` is an errno). */
const CREDENTIAL_PARAMETERS = ['password', 'client_secret', 'access_token', 'refresh_token', 'id_token', 'id_token_hint', 'device_code',
  'user_code', 'code_verifier', 'token', 'client_assertion', '_csrf']

/**
 * Never logged: anything that can carry a credential, should a log call ever include headers, a body or a
 * query. The request serializer below logs neither headers nor bodies, and a query only as loggableUrl does.
 * Exact paths only: each `*.name` wildcard costs about 3 µs on every line, the request line included.
 */
export const REDACTED_PATHS = [
  ...CREDENTIAL_HEADERS.flatMap((name) => [`req.headers["${name}"]`, `res.headers["${name}"]`, `headers["${name}"]`]),
  ...CREDENTIAL_PARAMETERS,
  ...['body', 'query', 'form', 'req.body', 'req.query'].flatMap((part) => [...CREDENTIAL_PARAMETERS, 'code'].map((name) => `${part}.${name}`)),
]

/** Query parameters whose values are no secret: logged as sent. */
const QUERY_VALUES_LOGGED = new Set(['response_type', 'response_mode', 'client_id', 'scope', 'prompt', 'max_age',
  'code_challenge_method', 'grant_type', 'token_type_hint', 'display', 'ui_locales'])
/** Known parameters logged by name only: their values are credentials, or may be (state, redirect_uri's own query). */
const QUERY_NAMES_LOGGED = new Set(['state', 'nonce', 'redirect_uri', 'code_challenge', 'login_hint', 'interaction', 'resource',
  'request', 'request_uri', 'claims', 'acr_values', 'username', 'code', 'iss', 'error', 'error_description', ...CREDENTIAL_PARAMETERS])

/**
 * A request target as the log shows it: the path, then each query parameter by name with its value only when
 * that is no secret (`/authorize?response_type=code&client_id=spa&state=[REDACTED]`); an unknown name may be
 * a token itself (`/userinfo?eyJ…`), so it is `[REDACTED]` whole.
 */
export function loggableUrl(url: string): string {
  const q = url.indexOf('?')
  const path = (q === -1 ? url : url.slice(0, q)).slice(0, 512)
  if (q === -1) return path
  const parts: string[] = []
  for (const [name, value] of new URLSearchParams(url.slice(q + 1))) {
    if (QUERY_VALUES_LOGGED.has(name)) parts.push(`${name}=${encodeURIComponent(value.slice(0, 256))}`)
    else parts.push(QUERY_NAMES_LOGGED.has(name) ? `${name}=[REDACTED]` : '[REDACTED]')
    if (parts.length === 32) break
  }
  return `${path}?${parts.join('&')}`
}

/** fastify's request serializer without the query's secrets (and without `version`, which we do not use). */
export function serializeRequest(request: FastifyRequest) {
  return { method: request.method, url: loggableUrl(request.url), host: request.host, remoteAddress: request.ip,
    remotePort: request.socket?.remotePort }
}

/** fastify's own 404 line names the raw URL: a wrong method on `/device?user_code=…` must not log the code. */
export class RedactingLogController extends LogController {
  override routeNotFound(request: FastifyRequest): void {
    if (this.isLogDisabled(request)) return
    request.log.info(`Route ${request.raw.method}:${loggableUrl(request.raw.url ?? '')} not found`)
  }
}
