/**
 * Issuing tokens: JWT access tokens per RFC 9068 or opaque ones, opaque refresh
 * tokens of 256 random bits (RFC 6749 §10.10) stored only as SHA-256 hashes, each in a rotation family (the grant).
 */
import { randomUUID } from 'node:crypto'
import { LRUCache } from 'lru-cache'
import { signCompactJws } from '../crypto/jws.js'
import { tokenHash } from '../authn/token-cache.js'
import type { AuthServerSettings } from './settings.js'
import type { SigningKeys } from './keys/signing-keys.js'
import type { User } from './users.js'
import type { ArtifactWrite, StorageAdapter } from './storage/adapter.js'
import type { RegisteredClient } from './registered-client.js'
import { randomToken } from './random.js'

import { OPAQUE_ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX } from '../common/token-formats.js'
export { OPAQUE_ACCESS_TOKEN_PREFIX, REFRESH_TOKEN_PREFIX }

/** Re-exported for the test suites that import it from here. */
export { randomToken }

/** `token_type` of a token response or an introspection answer: DPoP for a bound token (RFC 9449 §5, §6.2). */
export function tokenTypeOf(jkt: string | undefined): 'Bearer' | 'DPoP' {
  return jkt === undefined ? 'Bearer' : 'DPoP'
}

/** A grant (refresh family): what was granted to whom, until when at the latest (refresh never extends it, RFC 9700 §4.14.2). */
export interface GrantRecord {
  readonly grantId: string
  readonly clientId: string
  readonly sub: string
  readonly scope: readonly string[]
  readonly createdAt: number
  /** Seconds since the epoch: no token of the grant outlives this. */
  readonly expiresAt: number
  readonly authTime?: number
  /**
   * RFC 8707: the resources the grant was authorized for, which its access tokens may narrow but never
   * widen (resource.ts). Absent: the configured `access_token.audience`, whatever it is at the time.
   */
  readonly resource?: readonly string[]
  /**
   * RFC 9449 §5: the thumbprint of the DPoP key a public client's refresh tokens are bound to, set when the
   * grant started with a proof; every refresh must then come with a proof of that key.
   */
  readonly jkt?: string
  /** `access_token.claims`: the user's claims as of the grant's start (the sign-in), copied into every access token. */
  readonly claims?: Readonly<Record<string, unknown>>
}

/** What issuing a token reads of its grant: everything but createdAt (a refresh token's record holds all of it). */
export type TokenGrant = Omit<GrantRecord, 'createdAt'>

/** What the store keeps of an access token: enough to answer introspection and to revoke it. */
export interface StoredAccessToken {
  readonly grantId: string
  readonly jti: string
  readonly clientId: string
  readonly sub: string
  readonly scope: string
  readonly aud: readonly string[]
  readonly iat: number
  readonly exp: number
  readonly format: 'jwt' | 'opaque'
  /** RFC 9449 §6: the thumbprint of the DPoP key the token is bound to; absent for a Bearer token. */
  readonly jkt?: string
  /** RFC 8705 §3.1: the thumbprint of the TLS client certificate the token is bound to. */
  readonly x5t?: string
  readonly [member: string]: unknown
}

export interface StoredRefreshToken {
  readonly grantId: string
  readonly clientId: string
  readonly sub: string
  /** The scope of the grant, kept whole however the access tokens were narrowed (RFC 6749 §6). */
  readonly scope: readonly string[]
  readonly grantExpiresAt: number
  readonly authTime?: number
  /** The resources of the grant, kept whole however the access tokens were narrowed (RFC 8707 §2.2). */
  readonly resource?: readonly string[]
  /** The grant's DPoP key binding (GrantRecord.jkt). */
  readonly jkt?: string
  /** The grant's user claims (GrantRecord.claims). */
  readonly claims?: Readonly<Record<string, unknown>>
  readonly [member: string]: unknown
}

/** An access token minted but not yet stored: the token, and the write that stores its record. */
export interface MintedAccessToken {
  readonly token: string
  readonly tokenType: 'Bearer' | 'DPoP'
  readonly expiresIn: number
  readonly record: StoredAccessToken
  readonly write: ArtifactWrite
}

/** RFC 6749 §5.1 success body. */
export interface TokenResponseBody {
  access_token: string
  /** DPoP when the access token is bound to the request's DPoP key (RFC 9449 §5). */
  token_type: 'Bearer' | 'DPoP'
  expires_in: number
  scope: string
  refresh_token?: string
  /** Only when the granted scope holds openid (OIDC Core §3.1.3.3; id-token.ts). */
  id_token?: string
}

/** What a token response hands out of its grant (TokenService.respond). */
export interface ResponseTokens {
  /** The access token's scope: the grant's, or narrower (RFC 6749 §3.3). */
  readonly scope: readonly string[]
  /** Whether a refresh token goes with it; only ever when the client is registered for refresh_token. */
  readonly withRefresh: boolean
  /** RFC 8707 §2.2: the access token's audience; the configured `access_token.audience` when absent. */
  readonly audience?: readonly string[] | undefined
  /** RFC 9449 §6: the key of the request's DPoP proof, which the access token is bound to (token_type DPoP). */
  readonly jkt?: string | undefined
}

export class TokenService {
  /**
   * The records of the access tokens issued last, by id, until the token endpoint's audit line takes them:
   * it names the subject and grant without reading back what was just written. Bounded: a line whose
   * record fell out reads the store instead.
   */
  private readonly justIssued = new LRUCache<string, StoredAccessToken>({ max: 1024 })

  constructor(private readonly settings: AuthServerSettings, private readonly keys: SigningKeys,
    private readonly store: StorageAdapter, private readonly now: () => number) {}

  /** `access_token.claims` of this user: the named claims it has, or undefined when none is named or it has none. */
  private userClaims(user: User): Record<string, unknown> | undefined {
    const named = this.settings.accessTokenClaims.filter((name) => Object.hasOwn(user.claims, name) && user.claims[name] !== undefined)
    return named.length === 0 ? undefined : Object.fromEntries(named.map((name) => [name, user.claims[name]]))
  }

  /**
   * The record of an access token issued moments ago, once, by the token itself: the audit line needs no
   * decode of what was just signed.
   */
  takeIssued(token: string): StoredAccessToken | undefined {
    const record = this.justIssued.get(token)
    this.justIssued.delete(token)
    return record
  }

  private nowSeconds(): number {
    return Math.floor(this.now() / 1000)
  }

  /**
   * Starts a grant (a refresh family) for a user or client. A grant that can never be refreshed
   * (client_credentials) lives only as long as its access token, so the store does not keep it for 30 days.
   * `jkt`, the key of the request's DPoP proof, binds the grant's refresh tokens when the client is public
   * (RFC 9449 §5); a confidential client's are not bound, since it authenticates each refresh.
   */
  async startGrant(client: RegisteredClient, sub: string, scope: readonly string[],
    options: { authTime?: number | undefined; refreshable?: boolean; resource?: readonly string[] | undefined; jkt?: string | undefined;
      user?: User | undefined } = {},
  ): Promise<GrantRecord> {
    const { authTime, refreshable = true, resource } = options
    const claims = options.user && this.userClaims(options.user)
    const jkt = refreshable && !client.confidential ? options.jkt : undefined
    const createdAt = this.nowSeconds()
    const lifetime = refreshable ? this.settings.refreshTokenTtlSeconds : this.settings.accessTokenTtlSeconds
    const grant: GrantRecord = {
      grantId: randomUUID(),
      clientId: client.clientId,
      sub,
      scope,
      createdAt,
      expiresAt: createdAt + lifetime,
      ...(authTime !== undefined && { authTime }),
      ...(resource !== undefined && { resource: [...resource] }),
      ...(jkt !== undefined && { jkt }),
      ...(claims !== undefined && { claims }),
    }
    // Only a refreshable grant is looked up later; a client_credentials grant is never stored (one write less).
    if (refreshable) await this.store.upsert('grant', grant.grantId, { ...grant }, lifetime)
    return grant
  }

  /**
   * An access token of the grant, narrowed to `scope`; recorded so the grant's revocation reaches it. With
   * `jkt` (the request's DPoP key), bound to that key.
   */
  async issueAccessToken(grant: TokenGrant, scope: readonly string[], audience: readonly string[] = this.settings.audience,
    jkt?: string, x5t?: string): Promise<MintedAccessToken> {
    const minted = this.mintAccessToken(grant, scope, audience, jkt, x5t)
    await this.store.upsert(minted.write.kind, minted.write.id, minted.write.value, minted.write.expiresInSeconds)
    this.noteIssued(minted)
    return minted
  }

  /**
   * An access token and the store write that records it, not yet written: refresh rotation writes it in the
   * same atomic step as the consume (StorageAdapter.consumeAndWrite), then calls noteIssued.
   */
  mintAccessToken(grant: TokenGrant, scope: readonly string[], audience: readonly string[] = this.settings.audience,
    jkt?: string, x5t?: string): MintedAccessToken {
    const { settings } = this
    const iat = this.nowSeconds()
    const expiresIn = Math.max(1, Math.min(settings.accessTokenTtlSeconds, grant.expiresAt - iat))
    const exp = iat + expiresIn
    const jti = randomUUID()
    const record: StoredAccessToken = {
      grantId: grant.grantId, jti, clientId: grant.clientId, sub: grant.sub, scope: scope.join(' '),
      aud: [...audience], iat, exp, format: settings.accessTokenFormat, ...(jkt !== undefined && { jkt }), ...(x5t !== undefined && { x5t }),
      ...(grant.claims !== undefined && { claims: grant.claims }),
    }
    let token: string
    let id: string
    if (settings.accessTokenFormat === 'opaque') {
      token = randomToken(OPAQUE_ACCESS_TOKEN_PREFIX)
      id = tokenHash(token)
    } else {
      const key = this.keys.current(settings.algorithm)
      // RFC 9068 §2: typ at+jwt, and iss, exp, aud, sub, client_id, iat, jti.
      token = signCompactJws({ alg: key.alg, kid: key.kid, typ: 'at+jwt' }, {
        // `access_token.claims` first: none of them can stand in for a claim below (lint refuses the registered names too).
        ...grant.claims,
        client_id: grant.clientId,
        scope: record.scope,
        ...(grant.authTime !== undefined && { auth_time: grant.authTime }),
        iss: settings.issuer,
        sub: grant.sub,
        aud: audience.length === 1 ? audience[0]! : [...audience],
        iat,
        exp,
        jti,
        // RFC 9449 §6.1, RFC 8705 §3.1: the confirmation of the DPoP key, or the certificate, the token is bound to.
        ...((jkt !== undefined || x5t !== undefined) && { cnf: { ...(jkt !== undefined && { jkt }), ...(x5t !== undefined && { 'x5t#S256': x5t }) } }),
      }, key.privateKey)
      id = jti
    }
    return { token, tokenType: tokenTypeOf(jkt), expiresIn, record, write: { kind: 'access_token', id, value: { ...record }, expiresInSeconds: expiresIn } }
  }

  /** Keeps a minted access token's record for the token endpoint's audit line (takeIssued), once it is stored. */
  noteIssued(minted: MintedAccessToken): void {
    this.justIssued.set(minted.token, minted.record)
  }

  /** A new refresh token of the grant; it lives until the refresh TTL, never past the grant. */
  async issueRefreshToken(grant: TokenGrant): Promise<string> {
    const { token, write } = this.mintRefreshToken(grant)
    await this.store.upsert(write.kind, write.id, write.value, write.expiresInSeconds)
    return token
  }

  /** A refresh token and the store write that records it, not yet written (see mintAccessToken). */
  mintRefreshToken(grant: TokenGrant): { token: string; write: ArtifactWrite } {
    const token = randomToken(REFRESH_TOKEN_PREFIX)
    const ttl = grant.expiresAt - this.nowSeconds()
    const record: StoredRefreshToken = {
      grantId: grant.grantId, clientId: grant.clientId, sub: grant.sub, scope: grant.scope, grantExpiresAt: grant.expiresAt,
      ...(grant.authTime !== undefined && { authTime: grant.authTime }),
      ...(grant.resource !== undefined && { resource: [...grant.resource] }),
      ...(grant.jkt !== undefined && { jkt: grant.jkt }),
      ...(grant.claims !== undefined && { claims: grant.claims }),
    }
    return { token, write: { kind: 'refresh_token', id: tokenHash(token), value: { ...record }, expiresInSeconds: Math.max(1, ttl) } }
  }

  /**
   * The RFC 6749 §5.1 response: an access token, and a refresh token when asked for and the client may
   * refresh.
   */
  async respond(client: RegisteredClient, grant: GrantRecord, tokens: ResponseTokens): Promise<TokenResponseBody> {
    const { scope, withRefresh, audience, jkt } = tokens
    // Written together: one commit of the store (group commit) rather than two in a row.
    const [{ token, tokenType, expiresIn }, refreshToken] = await Promise.all([
      this.issueAccessToken(grant, scope, audience, jkt, client.boundCertificate),
      withRefresh && client.grantTypes.has('refresh_token') ? this.issueRefreshToken(grant) : undefined,
    ])
    return {
      access_token: token, token_type: tokenType, expires_in: expiresIn, scope: scope.join(' '),
      ...(refreshToken !== undefined && { refresh_token: refreshToken }),
    }
  }
}
