/**
 * The one storage interface of the embedded authorization server (STYLE §5). Every adapter (memory for
 * unit tests, SQLite by default, Redis for several instances) passes the same contract suite
 * (test/authserver/storage/contract.test.ts). Values are JSON objects; ids are opaque strings the server chooses
 * (token hashes, jtis, kids, codes) and never raw refresh tokens.
 */

export type ArtifactKind =
  | 'access_token'        // id: jti (JWT) or SHA-256 of the token (opaque); grantId set
  | 'refresh_token'       // id: SHA-256 of the token; grantId = the rotation family
  | 'authorization_code'  // id: SHA-256 of the code
  | 'device_code'         // id: SHA-256 of the device code; userCode set
  | 'revoked_jti'         // id: jti of a revoked JWT access token, kept until the token's exp
  | 'signing_key'         // id: kid
  | 'grant'               // id: grantId; what a family was granted, for absolute lifetime and revocation
  | 'session'             // id: SHA-256 of the browser session cookie; who logged in, when
  | 'interaction'         // id: SHA-256 of an interaction id; an authorization request waiting for login or consent
  | 'consent'             // id: sub + client_id; the scopes a user has agreed to give a client
  | 'refresh_successor'   // id: SHA-256 of a rotated-out refresh token; its rotation's response, sealed under that token (reuse grace)
  | 'registered_client'   // id: client_id; an RFC 7591 registration (registration/registrations.ts), rewritten once when first used
  | 'federated_login'     // id: SHA-256 of the upstream state; a sign-in sent to an identity provider, waiting for its callback
  | 'account'             // id: our sub; a user an identity provider vouched for, as of their last sign-in
  | 'logout'              // id: SHA-256 of a logout state; where to send the browser once the identity provider has logged it out

/** A stored value: any JSON object; `grantId` and `userCode` are indexed. */
export interface StoredArtifact {
  readonly grantId?: string
  readonly userCode?: string
  readonly [member: string]: unknown
}

/** What `find` returns: the value, plus when it was consumed (if it was). */
export type FoundArtifact = StoredArtifact & { readonly consumedAt?: number }

export interface ArtifactRecord {
  readonly kind: ArtifactKind
  readonly id: string
  readonly value: FoundArtifact
  /** Milliseconds since the epoch. */
  readonly expiresAt: number
}

/** One artifact to write, as `upsert` takes it. */
export interface ArtifactWrite {
  readonly kind: ArtifactKind
  readonly id: string
  readonly value: StoredArtifact
  readonly expiresInSeconds: number
}

export interface StorageAdapter {
  /** Inserts or replaces; the artifact stops being found (and is purged) after `expiresInSeconds`. */
  upsert(kind: ArtifactKind, id: string, value: StoredArtifact, expiresInSeconds: number): Promise<void>
  /** The unexpired artifact, consumed or not, or undefined. */
  find(kind: ArtifactKind, id: string): Promise<FoundArtifact | undefined>
  /** The unexpired device_code artifact with this user code, or undefined. */
  findByUserCode(userCode: string): Promise<FoundArtifact | undefined>
  /**
   * Marks the artifact consumed, atomically: true for the first caller only, false when it was consumed
   * already, is missing or has expired (single-use codes, refresh rotation).
   */
  consume(kind: ArtifactKind, id: string): Promise<boolean>
  /**
   * A consume that hands something out in exchange (refresh rotation): atomically, when the artifact is
   * live and unconsumed and `requires` (if given) is live, marks it consumed and upserts `writes`; true.
   * Otherwise nothing changes; false. So nothing (a revocation of the grant) falls between the consume and
   * the writes. A rejection means nothing changed: the SQLite transaction rolls back, and the Redis adapter
   * sends an undo after a consume whose reply did not come in time (redis.ts). A write may name the consumed
   * artifact itself: it then replaces it, unconsumed (an update of a live artifact only: a registration
   * marked used can never bring back one deleted meanwhile).
   */
  consumeAndWrite(kind: ArtifactKind, id: string, writes: readonly ArtifactWrite[], requires?: { kind: ArtifactKind; id: string }): Promise<boolean>
  destroy(kind: ArtifactKind, id: string): Promise<void>
  /** Deletes every artifact, of every kind, of the grant, and returns what was deleted (to deny-list its tokens). */
  revokeByGrantId(grantId: string): Promise<ArtifactRecord[]>
  /** Every unexpired artifact of a kind (signing keys, and revoked jtis when a process starts). */
  list(kind: ArtifactKind): Promise<ArtifactRecord[]>
  /** Deletes expired artifacts now; also run on a schedule by adapters that keep files. Returns how many. */
  purgeExpired(): Promise<number>
  /**
   * Optional: runs `task` while no other process sharing the store runs a task under the same `name`
   * (waiting for it first). Stores one host uses (memory, SQLite) leave it out; the Redis one has it, so
   * that instances starting at once on an empty store generate one set of signing keys (keys.ts). The lock
   * is a lease: a holder that takes longer than it loses the lock, so callers still cope with a race.
   */
  withLock?<T>(name: string, task: () => Promise<T>): Promise<T>
  /**
   * Optional: true the first time `id` is seen, false for every later call while it is remembered, which is
   * at least `expiresInSeconds`; atomic across every process sharing the store. The single use of DPoP proofs
   * (RFC 9449 §11.1) between instances: the Redis store has it; stores one host uses leave it out, and the
   * proofs are then remembered in the process (src/dpop/replay.ts). Its ids are no artifact's.
   */
  firstUse?(id: string, expiresInSeconds: number): Promise<boolean>
  /** Throws when the store cannot be used (readiness). */
  ping(): Promise<void>
  close(): Promise<void>
}

export interface StorageOptions {
  /** Milliseconds since the epoch; injected by tests. */
  now?: () => number
}
