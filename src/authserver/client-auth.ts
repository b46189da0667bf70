/**
 * Client authentication at the back-channel endpoints (RFC 6749 §2.3): client_secret_basic,
 * client_secret_post, or `none` for public clients, which only identify themselves. Secrets are compared
 * only through RegisteredClient.verifySecret (constant time); failures are throttled (RFC 6749 §2.3.1: the
 * endpoint must be protected against brute force), each attempt counted before it is verified, so that
 * guesses sent in parallel see each other.
 */
import type { FastifyRequest } from 'fastify'
import type { AuditEvents } from '../audit/audit.js'
import { InvalidClient, InvalidRequest } from '../errors/oauth-errors.js'
import type { ClientAuthMethod, RegisteredClient } from './registered-client.js'
import type { AuthServerContext } from './context.js'
import type { Form } from './http.js'
import { verifyThrottled } from './throttle.js'
import { peerCertificate } from '../common/client-certificate.js'

export interface BasicCredentials {
  readonly clientId: string
  readonly clientSecret: string
}

interface PresentedCredentials {
  readonly method: ClientAuthMethod
  readonly clientId: string
  readonly clientSecret?: string
  /** RFC 6749 §5.2: the 401 then carries a Basic challenge. */
  readonly usedAuthorizationHeader: boolean
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/
const utf8 = new TextDecoder('utf-8', { fatal: true })

/** RFC 6749 App. B: `+` is a space, then %XX octets as UTF-8; a bad %-sequence is malformed (invalid_request). */
function formDecode(part: string): string {
  try {
    return decodeURIComponent(part.replace(/\+/g, ' '))
  } catch (error) {
    throw new InvalidRequest('malformed Basic credentials', { detail: 'bad %-sequence in the Basic credentials', cause: error })
  }
}

/**
 * The client_id and secret of an `Authorization: Basic` header (RFC 6749 §2.3.1, RFC 7617 §2): base64, split at the
 * first `:`, each part form-decoded. Malformed base64, no `:` or a bad %-sequence → 400 invalid_request.
 */
export function decodeBasicCredentials(header: string): BasicCredentials {
  const match = /^(\S+)[ \t]+(\S+)[ \t]*$/.exec(header)
  if (!match || match[1]!.toLowerCase() !== 'basic') {
    throw new InvalidRequest('the Authorization header must carry Basic credentials', { detail: 'not a Basic Authorization header' })
  }
  const token = match[2]!
  const padded = token.includes('=')
  if (!BASE64.test(token) || (padded ? token.length % 4 !== 0 : token.length % 4 === 1)) {
    throw new InvalidRequest('malformed Basic credentials', { detail: 'the Basic credentials are not base64' })
  }
  let decoded: string
  try {
    decoded = utf8.decode(Buffer.from(token, 'base64'))
  } catch (error) {
    throw new InvalidRequest('malformed Basic credentials', { detail: 'the Basic credentials are not UTF-8', cause: error })
  }
  const colon = decoded.indexOf(':')
  if (colon === -1) throw new InvalidRequest('malformed Basic credentials', { detail: 'no ":" in the Basic credentials' })
  return { clientId: formDecode(decoded.slice(0, colon)), clientSecret: formDecode(decoded.slice(colon + 1)) }
}

/** Which mechanism the request used, and with what; two at once is invalid_request (RFC 6749 §2.3: one method per request). */
function presentedCredentials(header: string | undefined, form: Form): PresentedCredentials {
  const bodyId = form.get('client_id')
  const bodySecret = form.get('client_secret')
  const assertion = form.has('client_assertion') || form.has('client_assertion_type')
  if (header !== undefined) {
    const basic = decodeBasicCredentials(header)
    if (bodySecret !== undefined || assertion) throw new InvalidRequest('use exactly one client authentication mechanism')
    if (bodyId !== undefined && bodyId !== basic.clientId) {
      throw new InvalidRequest('client_id differs from the Basic credentials')
    }
    return { method: 'client_secret_basic', clientId: basic.clientId, clientSecret: basic.clientSecret, usedAuthorizationHeader: true }
  }
  if (assertion) {
    if (bodySecret !== undefined) throw new InvalidRequest('use exactly one client authentication mechanism')
    throw new InvalidClient(false, 'client assertions (private_key_jwt, client_secret_jwt) are not supported')
  }
  if (bodyId === undefined) throw new InvalidClient(false, 'no client_id and no Authorization header')
  if (bodySecret !== undefined) return { method: 'client_secret_post', clientId: bodyId, clientSecret: bodySecret, usedAuthorizationHeader: false }
  return { method: 'none', clientId: bodyId, usedAuthorizationHeader: false }
}

type FailureReason = AuditEvents['client.authentication_failed']['reason']

/** Why authentication failed, for the audit line, and the error the client gets. */
interface Refusal {
  readonly reason: FailureReason
  readonly error: InvalidClient
}

/** @param request its address bounds the metadata documents fetched on its behalf; its connection's certificate (RFC 8705) */
async function verifyClient(presented: PresentedCredentials, ctx: AuthServerContext, request: FastifyRequest): Promise<RegisteredClient | Refusal> {
  const { clientId, clientSecret, usedAuthorizationHeader: header } = presented
  const refuse = (reason: FailureReason, detail: string, challenge = header): Refusal => ({ reason, error: new InvalidClient(challenge, detail) })
  // The YAML's clients, then RFC 7591 registrations in the store: an unknown id reads the store as a registered one does.
  const client = await ctx.clients.lookup(clientId, request.ip)
  if (!client) {
    // One scrypt, as a wrong secret of a known client costs, so timing does not list the client_ids.
    if (clientSecret !== undefined) await ctx.clients.verifyUnknown(clientSecret)
    return refuse('unknown_client', `unknown client ${JSON.stringify(clientId.slice(0, 64))}`)
  }
  if (!client.confidential) {
    // RFC 6749 §2.1, §5.2: a public client only names itself; a secret (Basic, even an empty one) is invalid_client.
    if (presented.method !== 'none') return refuse('public_client_sent_secret', `public client ${clientId} sent a secret`)
    return client
  }
  // RFC 8705 §2: the client's TLS certificate is its credential, and its tokens are bound to it (§3).
  if (client.certificate !== undefined) {
    if (presented.method !== 'none') return refuse('unsupported_method', `client ${clientId} authenticates with its TLS certificate, not a secret`)
    const peer = peerCertificate(request.raw.socket)
    if (!client.certificate.accepts(peer)) {
      return refuse('wrong_certificate', `client ${clientId}: ${peer === undefined ? 'no TLS client certificate' : 'not its TLS client certificate'}`, false)
    }
    return { ...client, boundCertificate: peer!.thumbprint }
  }
  if (clientSecret === undefined) return refuse('no_secret', `confidential client ${clientId} sent no secret`, false)
  // Basic and post are both accepted whichever one the client registered (openid-client sends post by default).
  if (!(await client.verifySecret(clientSecret))) return refuse('wrong_secret', `wrong secret for client ${clientId}`)
  return client
}

/**
 * The client behind this request, authenticated (confidential) or identified (public). Throws 400
 * invalid_request for malformed or doubled credentials, 401 invalid_client when authentication fails,
 * 429 once the client_id or the source address has failed too often (`throttling`, RFC 6749 §2.3.1).
 */
export async function authenticateClient(request: FastifyRequest, form: Form, ctx: AuthServerContext): Promise<RegisteredClient> {
  const ipKey = `ip:${request.ip}`
  const audit = (reason: FailureReason, presented?: PresentedCredentials) => ctx.audit.emit('client.authentication_failed', {
    ...(presented && { client_id: presented.clientId.slice(0, 64), method: presented.method }),
    reason, endpoint: request.url?.split('?', 1)[0], ip: request.ip, req_id: request.id,
  })
  let presented: PresentedCredentials
  try {
    presented = presentedCredentials(request.headers.authorization, form)
  } catch (error) {
    // Nothing names a client: only the source address is charged.
    const attempt = await ctx.throttle.reserve([ipKey])
    attempt.keep()
    const assertion = form.has('client_assertion') || form.has('client_assertion_type')
    audit(!(error instanceof InvalidClient) ? 'malformed_credentials' : assertion ? 'unsupported_method' : 'no_client_id')
    throw error
  }
  // Counted before the secret is verified, so parallel guesses get no more verifications than the
  // allowance; given back when it verifies (only this attempt's points: no success clears earlier failures).
  const verified = await verifyThrottled(ctx.throttle, [`client:${presented.clientId}`, ipKey],
    () => verifyClient(presented, ctx, request), (outcome) => !('reason' in outcome))
  if (!('reason' in verified)) {
    // A registered client that authenticated is in use: it no longer expires unused.
    await verified.dynamic?.recordUse()
    return verified
  }
  audit(verified.reason, presented)
  throw verified.error
}
