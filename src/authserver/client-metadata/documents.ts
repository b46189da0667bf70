/**
 * OAuth Client ID Metadata Documents (draft-ietf-oauth-client-id-metadata-document; the MCP
 * authorization spec's preferred way for a client to introduce itself). A client_id that is an https URL
 * with a path names a JSON document the server fetches: the URL → the host allowed → the fetch (SSRF-safe:
 * address.ts; https, no redirects, bounded size and time, JSON only) → the document (its client_id is the
 * URL, byte for byte) → a public client with the document's redirect URIs, kept for its Cache-Control
 * max-age within the configured bounds. Every failure is InvalidClient: /authorize shows it on a page.
 */
import { isIP } from 'node:net'
import { LRUCache } from 'lru-cache'
import { Agent, request } from 'undici'
import type { AuthorizationServerConfig } from '../../config/schema.js'
import { parseDuration, parseSize } from '../../config/units.js'
import { InvalidClient } from '../../errors/oauth-errors.js'
import { metadataDocumentClient } from '../clients.js'
import type { RegisteredClient } from '../registered-client.js'
import { DEFAULT_REDIRECT_URI_FORMS, formNotAllowed, redirectUriForm, type RedirectUriForm } from '../registration/redirect-uris.js'
import { systemResolver, resolvePublic, validatingLookup, type Resolver } from './address.js'
import { DEFAULT_FETCH_BOUNDS, FetchBounds, type FetchBoundSettings } from './fetch-bounds.js'

export interface ClientMetadataDocumentSettings {
  /** Exact hosts or `*.example.com` patterns; empty: any (public) host. */
  readonly allowedHosts: readonly string[]
  /** What such a client may be given: the document's `scope` cut down to these (all of them when it has none). */
  readonly scopes: readonly string[]
  readonly maxSizeBytes: number
  /** The whole fetch: connection, headers and body. */
  readonly timeoutMs: number
  readonly cacheTtlMinMs: number
  readonly cacheTtlMaxMs: number
  /** Development only: loopback and private targets, and http on loopback. */
  readonly allowPrivateAddresses: boolean
  /** `redirect_uris`: the forms a document's redirect URIs may take (registration's; localhost only when listed). */
  readonly redirectUriForms: ReadonlySet<RedirectUriForm>
  /** `ca_file`: CAs trusted instead of the system's. */
  readonly caFile?: string
  /** `rate`: fetches per client address, and at once. */
  readonly bounds: FetchBoundSettings
}

/** `client_metadata_documents` with its defaults; undefined unless enabled. */
export function resolveClientMetadataDocuments(config: AuthorizationServerConfig['client_metadata_documents']): ClientMetadataDocumentSettings | undefined {
  if (!config?.enabled) return undefined
  return {
    allowedHosts: (config.allowed_hosts ?? []).map((host) => host.toLowerCase()),
    scopes: config.scopes ?? [],
    maxSizeBytes: parseSize(config.max_size ?? '5kb'),
    timeoutMs: parseDuration(config.timeout ?? '5s'),
    cacheTtlMinMs: parseDuration(config.cache_ttl?.min ?? '1m'),
    cacheTtlMaxMs: parseDuration(config.cache_ttl?.max ?? '24h'),
    allowPrivateAddresses: config.allow_private_addresses ?? false,
    redirectUriForms: new Set(config.redirect_uris ?? DEFAULT_REDIRECT_URI_FORMS),
    bounds: {
      fetches: config.rate?.fetches ?? DEFAULT_FETCH_BOUNDS.fetches,
      windowSeconds: Math.max(1, Math.ceil(parseDuration(config.rate?.window ?? '1m') / 1000)),
      concurrent: config.rate?.concurrent ?? DEFAULT_FETCH_BOUNDS.concurrent,
    },
    ...(config.ca_file !== undefined && { caFile: config.ca_file }),
  }
}

/** Whether a client_id names a document at all (otherwise it is simply unknown): an http(s) URL. */
export function isUrlClientId(clientId: string): boolean {
  return /^https?:\/\//.test(clientId)
}

/** `*.example.com` stands for exactly one label (`a.example.com`, not `example.com` nor `a.b.example.com`). */
export function hostAllowed(hostname: string, patterns: readonly string[]): boolean {
  if (patterns.length === 0) return true
  const labels = hostname.toLowerCase().split('.')
  return patterns.some((pattern) => {
    const wanted = pattern.split('.')
    return wanted.length === labels.length && wanted.every((label, index) => label === '*' ? labels[index] !== '' : label === labels[index])
  })
}

const isLoopbackHost = (hostname: string) => hostname === 'localhost' || hostname === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(hostname)

/** The draft's rules for the URL itself, and ours (allowed_hosts, http only on loopback in development). */
function documentUrl(clientId: string, settings: ClientMetadataDocumentSettings): URL {
  const refuse = (why: string) => new InvalidClient(false, `client_id metadata document URL ${why}`)
  if (clientId.length > 2000 || !URL.canParse(clientId)) throw refuse('is not a URL')
  const url = new URL(clientId)
  // The draft: https, a path, no fragment, no user information, no dot segments; the id is compared as sent, so it must be canonical.
  if (url.href !== clientId) throw refuse('is not in canonical form')
  const http = url.protocol === 'http:' && settings.allowPrivateAddresses && isLoopbackHost(url.hostname)
  if (url.protocol !== 'https:' && !http) throw refuse('must use https')
  if (url.pathname === '/' || url.hash !== '' || url.username !== '' || url.password !== '') throw refuse('must have a path and no fragment or user information')
  if (/\/\.\.?(\/|$)/.test(clientId.slice(url.origin.length))) throw refuse('must not contain dot segments')
  if (!hostAllowed(url.hostname, settings.allowedHosts)) throw refuse(`names a host not in allowed_hosts (${url.hostname})`)
  return url
}

const JSON_TYPE = /^application\/([a-z0-9.+-]+\+)?json\s*(;|$)/i

/** What to keep, from Cache-Control, within the configured bounds (no-store and no max-age: the minimum). */
function cacheTtlMs(cacheControl: string | undefined, settings: ClientMetadataDocumentSettings): number {
  const directives = (cacheControl ?? '').toLowerCase()
  const maxAge = /(?:^|,)\s*max-age\s*=\s*"?(\d{1,10})"?/.exec(directives)?.[1]
  const wanted = /(?:^|,)\s*(no-store|no-cache)\s*(,|$)/.test(directives) || maxAge === undefined ? 0 : Number(maxAge) * 1000
  return Math.min(settings.cacheTtlMaxMs, Math.max(settings.cacheTtlMinMs, wanted))
}

/** The document, checked; the client it describes. Descriptions (for the log) name the member and the rule. */
function clientFromDocument(clientId: string, document: unknown, settings: ClientMetadataDocumentSettings): RegisteredClient {
  const refuse = (why: string) => new InvalidClient(false, `client_id metadata document: ${why}`)
  if (typeof document !== 'object' || document === null || Array.isArray(document)) throw refuse('not a JSON object')
  const doc = document as Record<string, unknown>
  // The draft: the document's client_id MUST equal the URL it was fetched from, by simple string comparison.
  if (doc.client_id !== clientId) throw refuse('its client_id is not the URL it was fetched from')
  // The draft: a client identified by URL has no shared secret; private_key_jwt (with jwks_uri) is not supported here.
  if (doc.client_secret !== undefined || doc.client_secret_expires_at !== undefined) throw refuse('must not contain client_secret')
  const method = doc.token_endpoint_auth_method ?? 'none'
  if (method !== 'none') throw refuse('token_endpoint_auth_method must be none (private_key_jwt and secrets are not supported)')
  const grants = doc.grant_types ?? ['authorization_code']
  if (!Array.isArray(grants) || !grants.includes('authorization_code') || grants.some((grant) => grant !== 'authorization_code' && grant !== 'refresh_token')) {
    throw refuse('grant_types must include authorization_code and may add only refresh_token')
  }
  const responseTypes = doc.response_types ?? ['code']
  if (!Array.isArray(responseTypes) || responseTypes.some((type) => type !== 'code')) throw refuse('response_types may only be code')
  const redirects = doc.redirect_uris
  if (!Array.isArray(redirects) || redirects.length === 0 || redirects.length > 20) throw refuse('redirect_uris must be an array of 1 to 20 URIs')
  for (const uri of redirects) {
    if (typeof uri !== 'string') throw refuse('redirect_uris must be strings')
    const checked = redirectUriForm(uri)
    if ('problem' in checked) throw refuse(`a redirect URI ${checked.problem}`)
    if (!settings.redirectUriForms.has(checked.form)) throw refuse(`redirect_uris: ${formNotAllowed(checked.form)}`)
  }
  // RFC 9449 §5.2: the client asks that every token it gets be DPoP-bound; the token endpoint then refuses a request without a proof.
  const dpopBound = doc.dpop_bound_access_tokens ?? false
  if (typeof dpopBound !== 'boolean') throw refuse('dpop_bound_access_tokens must be true or false')
  if (doc.scope !== undefined && typeof doc.scope !== 'string') throw refuse('scope must be a string')
  const asked = doc.scope === undefined ? undefined : new Set(doc.scope.split(' '))
  const name = typeof doc.client_name === 'string' && doc.client_name.length <= 100 && !/[\p{Cc}\u202a-\u202e\u2066-\u2069]/u.test(doc.client_name)
    ? doc.client_name : undefined
  return metadataDocumentClient(clientId, {
    name,
    host: new URL(clientId).host,
    grantTypes: grants as Array<'authorization_code' | 'refresh_token'>,
    scopes: settings.scopes.filter((scope) => asked === undefined || asked.has(scope)),
    redirectUris: redirects as string[],
    dpopBoundAccessTokens: dpopBound,
  })
}

export interface FetchedDocument {
  readonly client: RegisteredClient
  readonly expiresAt: number
}

/** Clients described by their metadata documents, fetched on first use and kept as their Cache-Control says. */
export class ClientMetadataDocuments {
  private readonly cache = new LRUCache<string, FetchedDocument>({ max: 1000 })
  /** Concurrent lookups of one client_id share one fetch. */
  private readonly inFlight = new Map<string, Promise<FetchedDocument>>()
  private readonly agent: Agent
  private readonly resolver: Resolver
  private readonly bounds: FetchBounds

  /**
   * @param options.resolver DNS, injected in tests; every address it answers is checked before a connection is made
   * @param options.ca trusted CAs instead of the system's (tests)
   */
  constructor(private readonly settings: ClientMetadataDocumentSettings, private readonly now: () => number,
    options: { resolver?: Resolver; ca?: string } = {}) {
    this.resolver = options.resolver ?? systemResolver
    this.bounds = new FetchBounds(settings.bounds)
    this.agent = new Agent({
      connect: {
        lookup: validatingLookup(this.resolver, settings.allowPrivateAddresses),
        timeout: settings.timeoutMs,
        ...(options.ca !== undefined && { ca: options.ca }),
      },
      headersTimeout: settings.timeoutMs,
      bodyTimeout: settings.timeoutMs,
      maxResponseSize: settings.maxSizeBytes,
    })
  }

  /**
   * The client a URL client_id describes; undefined for any other client_id. Throws InvalidClient when the
   * document fails, TooManyAttempts when `from` (the client address that asks) has fetched too many (`rate`).
   */
  async client(clientId: string, from?: string): Promise<RegisteredClient | undefined> {
    if (!isUrlClientId(clientId)) return undefined
    const cached = this.cache.get(clientId)
    if (cached !== undefined && cached.expiresAt > this.now()) return cached.client
    let pending = this.inFlight.get(clientId)
    if (pending === undefined) {
      // Later steps of a flow /authorize admitted (login, consent) name no address: it was counted there.
      const ended = from === undefined ? undefined : await this.bounds.admit(from)
      pending = this.inFlight.get(clientId)
      if (pending !== undefined) ended?.()
      else {
        pending = this.fetchDocument(clientId).finally(() => {
          this.inFlight.delete(clientId)
          ended?.()
        })
        this.inFlight.set(clientId, pending)
      }
    }
    const fetched = await pending
    if (fetched.expiresAt > this.now()) this.cache.set(clientId, fetched)
    return fetched.client
  }

  async close(): Promise<void> {
    await this.agent.close()
  }

  private async fetchDocument(clientId: string): Promise<FetchedDocument> {
    const url = documentUrl(clientId, this.settings)
    const { maxSizeBytes, timeoutMs, allowPrivateAddresses } = this.settings
    const refuse = (why: string) => new InvalidClient(false, `client_id metadata document ${why}`)
    let text: string
    let cacheControl: string | undefined
    try {
      // An IP literal is connected to without a lookup: checked here instead.
      const literal = url.hostname.replace(/^\[(.*)\]$/, '$1')
      if (!allowPrivateAddresses && isIP(literal) !== 0) await resolvePublic(this.resolver, literal)
      const signal = AbortSignal.timeout(timeoutMs)
      // undici's request() never follows redirects: a 3xx is refused below, wherever it points.
      const response = await request(url, { dispatcher: this.agent, method: 'GET', headers: { accept: 'application/json' }, signal })
      try {
        if (response.statusCode !== 200) throw refuse(`answered ${response.statusCode}, not 200`)
        const type = response.headers['content-type']
        if (typeof type !== 'string' || !JSON_TYPE.test(type)) throw refuse('is not application/json')
        const length = Number(response.headers['content-length'] ?? 0)
        if (length > maxSizeBytes) throw refuse(`is larger than max_size (${maxSizeBytes} bytes)`)
        const chunks: Buffer[] = []
        let size = 0
        for await (const chunk of response.body as AsyncIterable<Buffer>) {
          size += chunk.length
          if (size > maxSizeBytes) throw refuse(`is larger than max_size (${maxSizeBytes} bytes)`)
          chunks.push(chunk)
        }
        text = Buffer.concat(chunks).toString('utf8')
        const header = response.headers['cache-control']
        cacheControl = Array.isArray(header) ? header.join(',') : header
      } finally {
        // Whatever is left unread is dropped with the connection; undici reports that as an error nobody awaits.
        response.body.on('error', () => {}).destroy()
      }
    } catch (error) {
      if (error instanceof InvalidClient) throw error
      // undici's maxResponseSize stops a body before it is all in memory.
      if ((error as { code?: unknown }).code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') throw refuse(`is larger than max_size (${maxSizeBytes} bytes)`)
      const reason = error instanceof Error ? `${error.name}: ${error.message}` : String(error)
      // Too large as undici counts it, too slow, refused address, TLS, DNS: all the same to the client.
      throw new InvalidClient(false, `client_id metadata document could not be fetched (${reason})`)
    }
    let document: unknown
    try {
      document = JSON.parse(text)
    } catch {
      throw refuse('is not valid JSON')
    }
    return { client: clientFromDocument(clientId, document, this.settings), expiresAt: this.now() + cacheTtlMs(cacheControl, this.settings) }
  }
}
