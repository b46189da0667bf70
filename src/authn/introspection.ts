/**
 * RFC 7662 token introspection for one issuer: the gateway authenticates as a client
 * (client_secret_basic or client_secret_post), trusts `active: true` only after its own checks of
 * `exp`, `iss` and `aud`, and caches both answers (inactive ones briefly). The endpoint being down or
 * slow is 503, never a guess.
 */
import { performance } from 'node:perf_hooks'
import { readFileSync } from 'node:fs'
import { Agent, request, type Dispatcher } from 'undici'
import { withClientSpan, type Span } from '../tracing/tracing.js'
import type { FastifyBaseLogger } from 'fastify'
import type { IssuerConfig, IntrospectionConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'
import { InvalidToken, TemporarilyUnavailable, type InvalidTokenReason } from '../errors/oauth-errors.js'
import type { IntrospectionOutcome, IntrospectionRecorder, Metrics } from '../metrics/metrics.js'
import { issuerClaims, readPermissions, unmetIssuerCondition, type IssuerClaims } from '../claims/issuer.js'
import { audienceMatches, keepClaims, readConfirmation, readScopes, type Principal } from '../common/principal.js'
import { tokenHash, type TokenCache } from './token-cache.js'

/** A cached introspection answer: a principal, or why the token was refused (logged, and counted). */
export type IntrospectionEntry =
  | { readonly active: true; readonly principal: Principal; readonly expiresAtMs: number; visited: boolean }
  | { readonly active: false; readonly detail: string; readonly reason: InvalidTokenReason; readonly expiresAtMs: number; visited: boolean }

const MAX_RESPONSE_BYTES = 64 * 1024

/** The endpoint answered, but with more than we read: an answer we refuse, not an endpoint that is down. */
class OversizedAnswer extends Error {}

/** undici's own timeouts, and AbortSignal.timeout's (a DOMException named TimeoutError). */
const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT'])

function failureOutcome(error: unknown): IntrospectionOutcome {
  const { name, code } = error as { name?: unknown; code?: unknown }
  return name === 'TimeoutError' || (typeof code === 'string' && TIMEOUT_CODES.has(code)) ? 'timeout' : 'error'
}

/** The endpoint answered with nothing we can use: refused (401), not cached. */
function badResponse(detail: string, cause?: unknown): InvalidToken {
  return new InvalidToken(detail, cause, 'bad_introspection_response')
}

/** RFC 6749 §2.3.1: client_id and secret are form-encoded before they are joined for Basic. */
function basicCredentials(clientId: string, secret: string): string {
  const encode = (value: string) => encodeURIComponent(value).replace(/%20/g, '+')
  return 'Basic ' + Buffer.from(`${encode(clientId)}:${encode(secret)}`).toString('base64')
}

/** What an introspection client shares with the authenticator that owns it. */
export interface IntrospectionClientOptions {
  /** The authenticator's introspection cache, shared by every introspecting issuer (keys name the issuer). */
  cache: TokenCache<IntrospectionEntry>
  now: () => number
  log: FastifyBaseLogger
  /** Where calls are counted (portcullis_introspection_requests_total); none when absent. */
  metrics?: Metrics
  /** The top-level claims a principal keeps (what route conditions and claim headers read); none when absent. */
  kept?: readonly string[]
}

export class IntrospectionClient {
  readonly issuer: string
  private readonly config: IntrospectionConfig
  private readonly keyPrefix: string
  private readonly timeoutMs: number
  private readonly positiveTtlMs: number
  private readonly negativeTtlMs: number
  private readonly skewSeconds: number
  private readonly authorization: string | undefined
  private readonly dispatcher: Agent
  private readonly audience: readonly string[]
  private readonly record: IntrospectionRecorder

  private readonly claims: IssuerClaims
  private readonly cache: TokenCache<IntrospectionEntry>
  private readonly now: () => number
  private readonly log: FastifyBaseLogger
  private readonly kept: readonly string[]

  constructor(issuer: IssuerConfig, options: IntrospectionClientOptions) {
    this.cache = options.cache
    this.now = options.now
    this.log = options.log
    this.kept = options.kept ?? []
    this.issuer = issuer.issuer
    this.claims = issuerClaims(issuer)
    this.record = options.metrics?.introspectionRecorder(issuer.issuer) ?? (() => undefined)
    this.config = issuer.introspection!
    this.audience = issuer.audience
    // RFC 7662 §4: the cache key names the issuer too, so two issuers never share an answer.
    this.keyPrefix = `${tokenHash(`${issuer.issuer}\n${this.config.endpoint}`).slice(0, 16)}:`
    this.timeoutMs = parseDuration(this.config.timeout ?? '2s')
    this.positiveTtlMs = parseDuration(this.config.cache_ttl ?? '60s')
    this.negativeTtlMs = parseDuration(this.config.negative_cache_ttl ?? '5s')
    this.skewSeconds = parseDuration(issuer.clock_skew ?? '30s') / 1000
    this.authorization = (this.config.auth_method ?? 'client_secret_basic') === 'client_secret_basic'
      ? basicCredentials(this.config.client_id, this.config.client_secret)
      : undefined
    this.dispatcher = new Agent({
      connectTimeout: this.timeoutMs,
      headersTimeout: this.timeoutMs,
      bodyTimeout: this.timeoutMs,
      ...(this.config.ca_file !== undefined && { connect: { ca: readFileSync(this.config.ca_file), rejectUnauthorized: true } }),
    })
  }

  /** Whether an opaque token may go to this issuer (`token_prefix`, when set). */
  accepts(token: string): boolean {
    const prefix = this.config.token_prefix
    return !prefix || token.startsWith(prefix)
  }

  cacheKey(hashOfToken: string): string {
    return this.keyPrefix + hashOfToken
  }

  async authenticate(token: string, hashOfToken: string): Promise<Principal> {
    const key = this.cacheKey(hashOfToken)
    // getOrLoad caches the answer, unless the token was invalidated while the endpoint was answering.
    const entry = await this.cache.getOrLoad(key, () => this.introspect(token))
    if (!entry.active) throw new InvalidToken(entry.detail, undefined, entry.reason)
    return entry.principal
  }

  /** One call to the endpoint (a cache miss), counted and timed whatever it comes to. */
  private async introspect(token: string): Promise<IntrospectionEntry> {
    const started = performance.now()
    let outcome: IntrospectionOutcome = 'error'
    try {
      const entry = await this.call(token)
      // What the endpoint said: any refusal but `inactive` is one of our own checks of an active answer.
      outcome = !entry.active && entry.reason === 'inactive' ? 'inactive' : 'active'
      return entry
    } catch (error) {
      if (error instanceof TemporarilyUnavailable) outcome = failureOutcome(error.internal.cause)
      throw error
    } finally {
      this.record(outcome, (performance.now() - started) / 1000)
    }
  }

  /** One introspection call, in a CLIENT span when `tracing.enabled`: the endpoint, never the token. */
  private call(token: string): Promise<IntrospectionEntry> {
    return withClientSpan('POST', { 'http.request.method': 'POST', 'url.full': this.config.endpoint, 'portcullis.fetch': 'introspection' },
      (span) => this.callOnce(token, span))
  }

  private async callOnce(token: string, span: Span | undefined): Promise<IntrospectionEntry> {
    const form = new URLSearchParams({ token, token_type_hint: 'access_token' })
    if (!this.authorization) {
      form.set('client_id', this.config.client_id)
      form.set('client_secret', this.config.client_secret)
    }
    let response: Dispatcher.ResponseData
    let text: string
    try {
      response = await request(this.config.endpoint, {
        method: 'POST',
        dispatcher: this.dispatcher,
        headers: {
          'content-type': 'application/x-www-form-urlencoded',
          accept: 'application/json',
          ...(this.authorization && { authorization: this.authorization }),
        },
        body: form.toString(),
        signal: AbortSignal.timeout(this.timeoutMs),
      })
      text = await readLimited(response.body)
    } catch (error) {
      if (error instanceof OversizedAnswer) throw badResponse('introspection_too_large', error)
      this.log.warn({ issuer: this.issuer, err: { message: (error as Error).message, code: (error as { code?: string }).code } },
        'introspection endpoint unreachable')
      throw new TemporarilyUnavailable('introspection_unavailable', 1, error)
    }
    span?.setAttribute('http.response.status_code', response.statusCode)
    // Not cached: the endpoint failing is not an answer about the token.
    if (response.statusCode !== 200) throw badResponse(`introspection_status_${response.statusCode}`)
    let body: Record<string, unknown>
    try {
      body = JSON.parse(text) as Record<string, unknown>
    } catch (error) {
      throw badResponse('introspection_malformed', error)
    }
    if (body === null || typeof body !== 'object' || typeof body.active !== 'boolean') {
      throw badResponse('introspection_malformed')
    }
    return this.judge(body)
  }

  /** RFC 7662 §2.2 answer → a cache entry; our own checks run even when the server says active. */
  private judge(body: Record<string, unknown>): IntrospectionEntry {
    const nowMs = this.now()
    const refuse = (reason: InvalidTokenReason, detail: string = reason): IntrospectionEntry =>
      ({ active: false, detail, reason, expiresAtMs: nowMs + this.negativeTtlMs, visited: false })
    if (body.active !== true) return refuse('inactive')
    const exp = body.exp
    if (exp !== undefined && typeof exp !== 'number') return refuse('bad_claim')
    if (typeof exp === 'number' && exp * 1000 <= nowMs - this.skewSeconds * 1000) return refuse('expired')
    if (body.iss !== undefined && body.iss !== this.issuer) return refuse('wrong_issuer')
    if (body.aud !== undefined && !audienceMatches(body.aud, this.audience)) return refuse('wrong_audience')
    // RFC 7662 §2.2: `scope` is a space-separated string (whatever `scope_claim` says the JWTs use); the
    // other permission claims of `scope_claim` (roles, groups) are read from the answer as from a JWT.
    const scopes = body.scope === undefined ? [] : typeof body.scope === 'string' ? readScopes(body, 'scope') : undefined
    if (!scopes) return refuse('bad_claim', 'bad_scope_claim')
    const { permissions, conditions } = this.claims
    const others = permissions?.filter((source) => source.kind === 'claim')
    const granted = others?.length ? [...new Set([...scopes, ...readPermissions(body, others)!])] : scopes
    const unmet = unmetIssuerCondition(conditions, body)
    if (unmet !== undefined) return refuse('bad_claim', `unmet_issuer_condition ${unmet}`)
    const clientId = body.client_id
    const confirmation = readConfirmation(body)
    if (confirmation === null) return refuse('bad_claim', 'bad_cnf_claim')
    const { jkt, x5t } = confirmation
    const principal: Principal = {
      ...(jkt !== undefined && { jkt }),
      ...(x5t !== undefined && { x5t }),
      issuer: this.issuer,
      subject: typeof body.sub === 'string' ? body.sub : undefined,
      clientId: typeof clientId === 'string' ? clientId : undefined,
      scopes: granted,
      expiresAt: typeof exp === 'number' ? exp : undefined,
      jti: typeof body.jti === 'string' ? body.jti : undefined,
      claims: keepClaims(body, this.kept),
    }
    const until = Math.min(nowMs + this.positiveTtlMs, typeof exp === 'number' ? exp * 1000 : Infinity)
    return { active: true, principal, expiresAtMs: until, visited: false }
  }

  close(): Promise<void> {
    return this.dispatcher.close()
  }
}

async function readLimited(body: Dispatcher.ResponseData['body']): Promise<string> {
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of body) {
    size += (chunk as Buffer).length
    if (size > MAX_RESPONSE_BYTES) {
      body.destroy()
      throw new OversizedAnswer(`introspection response larger than ${MAX_RESPONSE_BYTES} bytes`)
    }
    chunks.push(chunk as Buffer)
  }
  return Buffer.concat(chunks).toString('utf8')
}
