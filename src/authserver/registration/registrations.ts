/**
 * Dynamically registered clients in the store (RFC 7591, RFC 7592): one `registered_client` artifact per
 * client_id, so every instance sharing the store (Redis) sees it and a restart keeps it (SQLite). The store
 * keeps the metadata as registered, an scrypt hash of the client_secret (as a YAML `client_secret_hash`)
 * and a SHA-256 of the registration access token; never either secret.
 *
 * A new registration lives `unused_expiry`; the first time the client is used (a valid authorization
 * request, or a successful client authentication) it is rewritten to live for good, in one atomic step that
 * cannot bring back a registration deleted meanwhile (StorageAdapter.consumeAndWrite on itself).
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import { hashSecret } from '../../crypto/secret-hash.js'
import { dynamicClient } from '../clients.js'
import type { DynamicClientSource, RegisteredClient } from '../registered-client.js'
import type { StorageAdapter } from '../storage/adapter.js'
import type { ClientMetadata, RegistrationSettings } from './policy.js'

const KIND = 'registered_client'
/** "For good": a century, which every adapter can express as an expiry. */
const USED_LIFETIME_SECONDS = 100 * 365 * 86_400
export const CLIENT_ID_PREFIX = 'dcr_'
const ACCESS_TOKEN_PREFIX = 'rat_'

/** What the store keeps of one registration. */
export interface RegistrationRecord {
  readonly metadata: ClientMetadata
  /** Seconds since the epoch (RFC 7591 §3.2.1 client_id_issued_at). */
  readonly issuedAt: number
  readonly secretHash?: string
  /** base64url SHA-256 of the registration access token (RFC 7592 §3). */
  readonly accessTokenHash: string
  /** Milliseconds since the epoch of the first use; absent while unused. */
  readonly usedAt?: number
  readonly [member: string]: unknown
}

/** A registration just made: the only moment its secrets exist outside the client. */
export interface NewRegistration {
  readonly clientId: string
  readonly record: RegistrationRecord
  readonly clientSecret?: string
  readonly registrationAccessToken: string
}

const digest = (value: string) => createHash('sha256').update(value).digest()
/** 256 bits from the CSPRNG in base64url: the unreserved alphabet, so Basic form-encoding changes nothing (RFC 6749 §2.3.1: servers that forget to decode still match). */
const randomSecret = () => randomBytes(32).toString('base64url')

export class Registrations implements DynamicClientSource {
  /** `registration.policy.scopes`: what a user may grant a registered client at /authorize and /device. */
  private readonly policyScopes: ReadonlySet<string>

  /**
   * @param isTaken whether an id is already someone's (a YAML client_id, a user's sub): a new registration
   *   never gets one, however unlikely a random clash is
   */
  constructor(private readonly store: StorageAdapter, private readonly settings: RegistrationSettings,
    private readonly now: () => number, private readonly isTaken: (id: string) => boolean) {
    this.policyScopes = new Set(settings.scopes)
  }

  /** Stores a registration under a new random client_id, with a new secret (confidential) and registration access token. */
  async create(metadata: ClientMetadata): Promise<NewRegistration> {
    let clientId: string
    do clientId = CLIENT_ID_PREFIX + randomBytes(16).toString('base64url')
    while (this.isTaken(clientId))
    const clientSecret = metadata.token_endpoint_auth_method === 'none' ? undefined : randomSecret()
    const registrationAccessToken = ACCESS_TOKEN_PREFIX + randomSecret()
    const record: RegistrationRecord = {
      metadata,
      issuedAt: Math.floor(this.now() / 1000),
      ...(clientSecret !== undefined && { secretHash: await hashSecret(clientSecret) }),
      accessTokenHash: digest(registrationAccessToken).toString('base64url'),
    }
    await this.store.upsert(KIND, clientId, record, this.settings.unusedExpirySeconds)
    return { clientId, record, ...(clientSecret !== undefined && { clientSecret }), registrationAccessToken }
  }

  /** The live registration, or undefined (never registered, deleted, or expired unused). */
  async find(clientId: string): Promise<RegistrationRecord | undefined> {
    return await this.store.find(KIND, clientId) as RegistrationRecord | undefined
  }

  /** The client of a live registration, as every endpoint uses clients. */
  async client(clientId: string): Promise<RegisteredClient | undefined> {
    const record = await this.find(clientId)
    if (!record || this.isTaken(clientId)) return undefined
    return dynamicClient(clientId, record.metadata, record.secretHash, () => this.recordUse(clientId, record), this.policyScopes)
  }

  /** The registration behind an RFC 7592 request: its access token must match, compared in constant time. */
  async authorize(clientId: string, registrationAccessToken: string): Promise<RegistrationRecord | undefined> {
    const record = this.isTaken(clientId) ? undefined : await this.find(clientId)
    const presented = digest(registrationAccessToken)
    // An unknown client_id is compared against a digest of its own, so both refusals take the same path.
    const expected = record ? Buffer.from(record.accessTokenHash, 'base64url') : digest(`unknown:${clientId}`)
    const matches = expected.length === presented.length && timingSafeEqual(expected, presented)
    return record && matches ? record : undefined
  }

  /**
   * RFC 7592 §2.2: the metadata replaced as a whole, the rest kept (client_id, issue time, secret, registration
   * access token); only while the registration is live (one deleted meanwhile stays deleted): undefined then.
   */
  async update(clientId: string, record: RegistrationRecord, metadata: ClientMetadata): Promise<RegistrationRecord | undefined> {
    const updated: RegistrationRecord = { ...record, metadata }
    const lifetime = record.usedAt === undefined ? this.settings.unusedExpirySeconds : USED_LIFETIME_SECONDS
    const written = await this.store.consumeAndWrite(KIND, clientId, [{ kind: KIND, id: clientId, value: updated, expiresInSeconds: lifetime }])
    return written ? updated : undefined
  }

  /** RFC 7592 §2.3: the registration is gone at once, on every instance (the store is shared). */
  async delete(clientId: string): Promise<void> {
    await this.store.destroy(KIND, clientId)
  }

  private async recordUse(clientId: string, record: RegistrationRecord): Promise<void> {
    if (record.usedAt !== undefined) return
    const used: RegistrationRecord = { ...record, usedAt: this.now() }
    // Only while the registration is live: a deleted one stays deleted. Two instances racing both write it.
    await this.store.consumeAndWrite(KIND, clientId, [{ kind: KIND, id: clientId, value: used, expiresInSeconds: USED_LIFETIME_SECONDS }])
  }
}
