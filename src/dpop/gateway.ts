/**
 * DPoP at the gateway (RFC 9449 §7): `Authorization: DPoP <token>` with a `DPoP` proof. The token is
 * validated as any other (cached); the proof is verified on every request: signed by the key the token is
 * bound to (`cnf.jkt`), for this method and URL as the client addressed it (the gateway's public URL, not the
 * upstream's), for this token (`ath`), fresh (`iat`), once (`jti`), and with a server nonce when those are on.
 * A token bound to a key is never accepted as a Bearer token (§7.2).
 *
 * Where DPoP applies is a mode, per route and per issuer: `required` (Bearer tokens refused), `allowed` (the
 * default: either, each checked as its scheme says), `off` (Bearer only: the DPoP scheme is not read, as any
 * other scheme). A route's mode wins over its token issuer's.
 */
import type { IncomingMessage } from 'node:http'
import type { Principal } from '../common/principal.js'
import type { DpopConfig, DpopModeConfig, GatewayConfig } from '../config/schema.js'
import { DpopRefused, InvalidRequest } from '../errors/oauth-errors.js'
import type { Metrics } from '../metrics/metrics.js'
import { publicOrigin } from '../resources/metadata.js'
import { DpopProofError, proofHeader, verifyProof } from './proof.js'
import { memoryReplayCache, sharedReplayCache, type ReplayCache, type SharedOnce } from './replay.js'
import { resolveDpop, type DpopSettings } from './settings.js'

export type DpopMode = DpopModeConfig

/** What checking a request's proof reads of it (the gateway's per-request exchange has it all). */
export interface ProvenRequest {
  readonly req: IncomingMessage
  /** The origin-form path the route matched: `htu` must name it (RFC 9449 §4.3). */
  readonly path: string
  readonly rule: { readonly dpop: DpopMode | null }
  /** A proxy in front described the request (the decision endpoint): `htu` is checked against `server.public_url` only. */
  readonly described: boolean
}

// token68 (RFC 7235 §2.1), as for Bearer.
const DPOP_CREDENTIALS = /^DPoP +([A-Za-z0-9\-._~+/]+=*) *$/i

/** Whether an Authorization header names the DPoP scheme: its first letter, then the scheme whole. */
export function isDpopScheme(header: string): boolean {
  return (header.charCodeAt(0) | 0x20) === 0x64 && header.length > 5 && header.slice(0, 5).toLowerCase() === 'dpop '
}

export interface DpopGateOptions {
  readonly config: GatewayConfig
  readonly metrics: Metrics
  readonly now: () => number
  /** The store instances share (Redis): proofs are then single use across them. */
  readonly shared?: SharedOnce | undefined
  /** The gate of the configuration before a reload: its replay cache and nonces carry over. */
  readonly previous?: DpopGate | undefined
  /**
   * The embedded server's settings, resolved from the `dpop:` of the config it started with: used while that
   * section is unchanged, so /token and the API accept each other's nonces (one origin, one nonce for clients).
   */
  readonly initial?: { readonly config: DpopConfig | undefined; readonly settings: DpopSettings } | undefined
}

export class DpopGate {
  readonly settings: DpopSettings
  private replayCache: ReplayCache | undefined
  private readonly issuerModes: ReadonlyMap<string, DpopMode>
  /** `server.public_url`'s origin, for `htu`; else the connection's local address (requestUrl). */
  private readonly origin: string | undefined
  private readonly scheme: string
  private readonly key: string
  /** Whether some issuer says `dpop: required`: then every Bearer token is looked at (refuseBearer). */
  readonly issuerRequires: boolean

  constructor(private readonly options: DpopGateOptions) {
    const { config, previous } = options
    this.key = JSON.stringify(config.dpop ?? {})
    // A reload keeps what must not reset: the proofs seen (else a replay inside the window passes) and the nonce secret.
    const keep = previous !== undefined && previous.key === this.key
    const initial = options.initial !== undefined && JSON.stringify(options.initial.config ?? {}) === this.key ? options.initial.settings : undefined
    this.settings = keep ? previous.settings : initial ?? resolveDpop(config.dpop, options.now)
    // The proofs seen survive any reload that keeps the cache's size (a new cache would accept them once more).
    this.replayCache = previous !== undefined && previous.settings.replayCacheSize === this.settings.replayCacheSize ? previous.replayCache : undefined
    this.issuerModes = new Map((config.issuers ?? []).flatMap((issuer) => issuer.dpop === undefined ? [] : [[issuer.issuer, issuer.dpop] as const]))
    this.issuerRequires = [...this.issuerModes.values()].includes('required')
    this.origin = config.server?.public_url !== undefined ? publicOrigin(config)?.origin : undefined
    this.scheme = config.server?.tls ? 'https' : 'http'
  }

  /** The mode for a token of `issuer` on a route whose own mode is `routeMode`. */
  modeFor(routeMode: DpopMode | null, issuer: string): DpopMode {
    return routeMode ?? this.issuerModes.get(issuer) ?? 'allowed'
  }

  private replay(): ReplayCache {
    this.replayCache ??= this.options.shared !== undefined
      ? sharedReplayCache(this.options.shared)
      : memoryReplayCache(this.settings.replayCacheSize)
    return this.replayCache
  }

  /**
   * The URL the client addressed, for `htu`: `server.public_url`, else the address and port the connection
   * reached. Never the `Host` header: a client picks it, and a proof made for another server would then pass
   * here (found in review). Clients that reach the gateway by a name need `server.public_url`.
   */
  private requestUrl(req: IncomingMessage, path: string, decision: boolean): string {
    if (this.origin !== undefined) return `${this.origin}${path}`
    // A decision reaches us from the proxy in front, whose address the client never addressed.
    if (decision) throw new DpopRefused('dpop_no_public_url', 'the gateway cannot check the proof\'s htu: server.public_url is not set', 'invalid_dpop_proof')
    const address = req.socket.localAddress ?? ''
    const host = address.startsWith('::ffff:') ? address.slice(7) : address.includes(':') ? `[${address}]` : address
    return `${this.scheme}://${host}:${req.socket.localPort ?? ''}${path}`
  }

  /** The token of an `Authorization: DPoP …` header; InvalidRequest when it is malformed or too large. */
  token(header: string, maxTokenSize: number): string {
    const match = DPOP_CREDENTIALS.exec(header)
    if (!match) throw new InvalidRequest('malformed DPoP credentials')
    const token = match[1]!
    if (token.length > maxTokenSize) throw new InvalidRequest('the access token is too large')
    return token
  }

  /**
   * A token sent as Bearer: refused when it is bound to a key (§7.2) or DPoP is required here. Called only
   * when one of the two may hold (the pipeline tests `principal.jkt` and the route's mode first).
   */
  refuseBearer(principal: Principal, routeMode: DpopMode | null): void {
    if (principal.jkt !== undefined) {
      throw this.refused(principal.issuer, new DpopRefused('dpop_bound_as_bearer', 'the access token is bound to a key: send it with the DPoP scheme and a proof', 'invalid_token'))
    }
    if (this.modeFor(routeMode, principal.issuer) === 'required') {
      throw this.refused(principal.issuer, new DpopRefused('dpop_required', 'this resource takes DPoP-bound tokens only', 'invalid_token'))
    }
  }

  /**
   * Verifies the proof of a `DPoP` request for `principal` (already validated from `token`); throws DpopRefused.
   * A request the decision endpoint was asked about has `htu` checked against `server.public_url` only.
   */
  async verify(request: ProvenRequest, token: string, principal: Principal): Promise<void> {
    const { req, path } = request
    const routeMode = request.rule.dpop
    const decision = request.described
    const issuer = principal.issuer
    try {
      if (this.modeFor(routeMode, issuer) === 'off') throw new DpopRefused('dpop_off', 'tokens of this issuer are accepted as Bearer only', 'invalid_token')
      if (principal.jkt === undefined) throw new DpopRefused('dpop_unbound', 'the access token is not bound to a key: send it as Bearer', 'invalid_token')
      const proof = proofHeader(req)
      if (proof === undefined) throw new DpopRefused('dpop_missing', 'a DPoP proof is required with the DPoP scheme')
      const settings = this.settings
      const nonces = settings.nonces
      const verified = await verifyProof(proof, {
        method: req.method ?? 'GET',
        url: this.requestUrl(req, path, decision),
        accessToken: token,
        nonceValid: nonces === null ? undefined : (nonce) => nonces.valid(nonce),
      }, settings, Math.floor(this.options.now() / 1000))
      if (verified.jkt !== principal.jkt) throw new DpopRefused('dpop_key_mismatch', 'the DPoP proof is signed by another key than the token is bound to')
      let first: boolean
      try {
        first = await this.replay().firstUse(verified.jkt, verified.jti, verified.iat, settings.maxAgeSeconds + 2 * settings.clockSkewSeconds)
      } catch (error) {
        throw new DpopRefused('dpop_replay_unavailable', 'the DPoP proof could not be checked for replay', { status: 503, cause: error })
      }
      if (!first) throw new DpopRefused('dpop_replay', 'the DPoP proof was used before')
      this.options.metrics.validations(issuer, 'dpop').valid++
    } catch (error) {
      if (error instanceof DpopProofError) throw this.refused(issuer, new DpopRefused(error.reason, error.description, { useNonce: error.useNonce }))
      throw error instanceof DpopRefused ? this.refused(issuer, error) : error
    }
  }

  /** Counts `error` and completes its challenge (`algs`, a fresh nonce when nonces are on). */
  private refused(issuer: string, error: DpopRefused): DpopRefused {
    this.options.metrics.validations(issuer, 'dpop').refuse(error.reason)
    error.algs = this.settings.algs
    if (this.settings.nonces !== null) error.nonce = this.settings.nonces.current()
    return error
  }
}
