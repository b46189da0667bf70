/**
 * One issuer's key set: fetched once, kept when the endpoint fails, refreshed in the background when
 * older than `maxAge`, and refetched on an unknown `kid` at most once per `cooldown`, one fetch in flight.
 * Keys are imported once per key (jose's local JWKS caches them), never per request.
 */
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { createLocalJWKSet, errors, type JSONWebKeySet, type JWK, type JWTVerifyGetKey } from 'jose'
import { request } from 'undici'
import { withClientSpan, type Span } from '../tracing/tracing.js'
import type { FastifyBaseLogger } from 'fastify'
import { cleartextHost } from '../config/loopback.js'
import type { KeySetStats } from '../metrics/stats.js'
export type { KeySetStats } from '../metrics/stats.js'

export interface KeySetOptions {
  issuer: string
  /** An http(s) or file:// URL; omitted when `discovery` resolves it. */
  jwksUri?: string
  discovery: boolean
  /** `server.allow_insecure_http`: a discovered `jwks_uri` may be http:// off loopback (as a configured one may). */
  allowInsecureHttp?: boolean
  cooldownMs: number
  maxAgeMs: number
  fetchTimeoutMs: number
  now: () => number
  log: FastifyBaseLogger
}

const MAX_DOCUMENT_BYTES = 1024 * 1024
const PRIVATE_MEMBERS = ['d', 'p', 'q', 'dp', 'dq', 'qi', 'k', 'oth'] as const

/** No key set was ever fetched; `retryAfterSeconds` is when the cooldown allows the next attempt. */
export class KeySetUnavailable extends Error {
  constructor(message: string, readonly retryAfterSeconds: number) { super(message) }
}

async function fetchJson(url: string, timeoutMs: number): Promise<unknown> {
  if (url.startsWith('file://')) return JSON.parse(await readFile(fileURLToPath(url), 'utf8'))
  // With `tracing:` on, a CLIENT span under the request that needed the keys (or a root, for a background refresh).
  return withClientSpan('GET', { 'http.request.method': 'GET', 'url.full': url, 'portcullis.fetch': 'jwks' }, (span) => fetchJsonOnce(url, timeoutMs, span))
}

async function fetchJsonOnce(url: string, timeoutMs: number, span: Span | undefined): Promise<unknown> {
  const response = await request(url, {
    headers: { accept: 'application/json' },
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    signal: AbortSignal.timeout(timeoutMs),
  })
  span?.setAttribute('http.response.status_code', response.statusCode)
  if (response.statusCode !== 200) {
    await response.body.dump()
    throw new Error(`${url} answered ${response.statusCode}`)
  }
  const chunks: Buffer[] = []
  let size = 0
  for await (const chunk of response.body) {
    size += (chunk as Buffer).length
    if (size > MAX_DOCUMENT_BYTES) {
      response.body.destroy()
      throw new Error(`${url} sent more than ${MAX_DOCUMENT_BYTES} bytes`)
    }
    chunks.push(chunk as Buffer)
  }
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

/** Only public asymmetric signing keys: `oct` keys (HS*) and anything with private members are dropped. */
function usableKeys(document: unknown): JWK[] {
  const keys = (document as { keys?: unknown } | null)?.keys
  if (!Array.isArray(keys)) throw new Error('the JWKS has no "keys" array')
  return keys.filter((key): key is JWK =>
    key !== null && typeof key === 'object' && typeof (key as JWK).kty === 'string' && (key as JWK).kty !== 'oct' &&
    PRIVATE_MEMBERS.every((member) => !(member in key)))
}


export class RemoteKeySet {
  private keys?: JWTVerifyGetKey
  private kids = ''
  private keyCount = 0
  private jwksUri?: string
  private fetchedAt = -Infinity
  private lastAttempt = -Infinity
  private inflight?: Promise<void>
  private timer?: NodeJS.Timeout
  private closed = false
  /** Number of key-set documents fetched, successful or not (for tests and, later, metrics). */
  fetches = 0
  failures = 0

  constructor(private readonly options: KeySetOptions) {
    this.jwksUri = options.jwksUri
  }

  /** Starts the first fetch without waiting; failures are logged and retried on demand. */
  prefetch(): void {
    this.refresh('initial').catch(() => { /* logged in refresh */ })
  }

  /** jose key resolver (JWTVerifyGetKey): the key for a token's header, as JwtIssuer verifies with it. */
  readonly getKey: JWTVerifyGetKey = async (header, token) => {
    if (!this.keys) {
      // Never fetched yet: wait for a fetch, but do not start more than one per cooldown.
      if (this.inflight || !this.coolingDown()) await this.refresh('initial').catch(() => undefined)
      if (!this.keys) {
        const waitMs = this.lastAttempt + this.options.cooldownMs - this.options.now()
        throw new KeySetUnavailable(`no key set for ${this.options.issuer} could be fetched`, Math.max(1, Math.ceil(waitMs / 1000)))
      }
    } else if (this.options.now() - this.fetchedAt > this.options.maxAgeMs && this.coolingDown() === false) {
      this.refresh('max age').catch(() => undefined)  // stale-while-revalidate: keep serving the old keys
    }
    try {
      return await this.keys(header, token)
    } catch (error) {
      if (!(error instanceof errors.JWKSNoMatchingKey)) throw error
      if (this.inflight) await this.inflight.catch(() => undefined)
      else if (!this.coolingDown()) await this.refresh('unknown kid').catch(() => undefined)
      else throw error
      return this.keys!(header, token)
    }
  }

  private coolingDown(): boolean {
    return this.options.now() - this.lastAttempt < this.options.cooldownMs
  }

  private refresh(reason: string): Promise<void> {
    this.inflight ??= this.load(reason).finally(() => { this.inflight = undefined })
    return this.inflight
  }

  private async load(reason: string): Promise<void> {
    this.lastAttempt = this.options.now()
    const { log, issuer, fetchTimeoutMs, maxAgeMs, cooldownMs } = this.options
    try {
      this.jwksUri ??= await discoverJwksUri(issuer, fetchTimeoutMs, this.options.allowInsecureHttp === true)
      this.fetches++
      const keys = usableKeys(await fetchJson(this.jwksUri, fetchTimeoutMs))
      const jwks: JSONWebKeySet = { keys }
      this.keys = kidIndexedKeySet(jwks)
      this.keyCount = keys.length
      this.fetchedAt = this.options.now()
      const kids = keys.map((key) => key.kid ?? '(no kid)').sort().join(' ')
      if (kids !== this.kids) {
        log.info({ issuer, reason, kids: kids.split(' '), previous: this.kids ? this.kids.split(' ') : [] }, 'issuer key set changed')
        this.kids = kids
      }
      // Refresh in the background before the set is due, so no request ever waits for it.
      this.schedule(Math.max(1000, Math.floor(maxAgeMs * 0.8)))
    } catch (error) {
      this.failures++
      log.warn({ issuer, reason, err: { message: (error as Error).message } },
        this.keys ? 'key set refresh failed; keeping the keys already fetched' : 'key set fetch failed')
      this.schedule(Math.max(1000, cooldownMs))
      throw error
    }
  }

  private schedule(delayMs: number): void {
    if (this.closed) return
    clearTimeout(this.timer)
    this.timer = setTimeout(() => { this.refresh('background').catch(() => undefined) }, delayMs)
    this.timer.unref()
  }

  stats(): KeySetStats {
    return {
      issuer: this.options.issuer,
      fetches: this.fetches,
      failures: this.failures,
      keys: this.keyCount,
      ageMs: this.keys ? this.options.now() - this.fetchedAt : undefined,
    }
  }

  /** Stops background refreshes. */
  close(): void {
    this.closed = true
    clearTimeout(this.timer)
  }
}

/**
 * RFC 8414 §3 (well-known URI inserted before the issuer's path), then OpenID Connect Discovery 1.0 §4. A
 * `jwks_uri` over http:// off loopback is refused as a configured one is at load (`server.allow_insecure_http`
 * aside): the keys could be replaced in transit, and a metadata document must not lower what the config may not.
 */
async function discoverJwksUri(issuer: string, timeoutMs: number, allowInsecureHttp: boolean): Promise<string> {
  const url = new URL(issuer)
  const path = url.pathname === '/' ? '' : url.pathname.replace(/\/$/, '')
  const candidates = [
    `${url.origin}/.well-known/oauth-authorization-server${path}`,
    `${issuer.replace(/\/$/, '')}/.well-known/openid-configuration`,
  ]
  const failures: string[] = []
  for (const candidate of candidates) {
    try {
      const metadata = await fetchJson(candidate, timeoutMs) as { issuer?: unknown; jwks_uri?: unknown }
      // RFC 8414 §3.3: the metadata's issuer must be identical to the issuer it was fetched for.
      if (metadata.issuer !== issuer) throw new Error(`metadata issuer ${String(metadata.issuer)} differs`)
      if (typeof metadata.jwks_uri !== 'string' || !/^https?:\/\//.test(metadata.jwks_uri)) throw new Error('no jwks_uri')
      const host = allowInsecureHttp ? undefined : cleartextHost(metadata.jwks_uri)
      if (host !== undefined) throw new Error(`its jwks_uri uses http:// off loopback (${host}): refused, as in the config; use https://, or set server.allow_insecure_http: true`)
      return metadata.jwks_uri
    } catch (error) {
      failures.push(`${candidate}: ${(error as Error).message}`)
    }
  }
  throw new Error(`discovery failed: ${failures.join('; ')}`)
}

/**
 * jose's local key set, one per `kid`: jose finds a token's key by walking every key of the set (2.8 µs a verify
 * with 50 keys, against 0.5 with one); with a `kid` in the header only keys of that `kid` are candidates (RFC 7515
 * §4.1.4), so the set of those alone answers exactly as the whole set would. A token without `kid`, or with one
 * no key has, goes to the whole set (and its errors: JWKSNoMatchingKey starts the unknown-kid refetch).
 */
function kidIndexedKeySet(jwks: JSONWebKeySet): JWTVerifyGetKey {
  const all = createLocalJWKSet(jwks)
  const byKid = new Map<string, JWK[]>()
  for (const key of jwks.keys) {
    if (typeof key.kid !== 'string') continue
    const group = byKid.get(key.kid)
    if (group) group.push(key)
    else byKid.set(key.kid, [key])
  }
  if (byKid.size <= 1) return all
  const sets = new Map([...byKid].map(([kid, keys]) => [kid, createLocalJWKSet({ keys })]))
  return (header, token) => {
    const one = typeof header.kid === 'string' ? sets.get(header.kid) : undefined
    return (one ?? all)(header, token)
  }
}
