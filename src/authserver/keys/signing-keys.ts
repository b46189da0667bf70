/** The server's signing keys as tokens and endpoints use them; keys.ts is the implementation. */
import type { KeyObject } from 'node:crypto'
import type { JSONWebKeySet, JWTVerifyGetKey } from 'jose'
import type { SigningAlgorithm } from '../../common/token-formats.js'

export interface ActiveSigningKey {
  readonly kid: string
  readonly alg: SigningAlgorithm
  /** node:crypto's form of the private key, for crypto/jws.ts. */
  readonly privateKey: KeyObject
}

/** The server's own keys (src/authserver/keys.ts): generated on first start, kept in the store. */
export interface SigningKeys {
  /** The key new tokens of this algorithm are signed with now (throws if there is none). */
  current(alg: SigningAlgorithm): ActiveSigningKey
  /** The published keys, public members only (RFC 7517 §4), with kid, use and alg. */
  jwks(): JSONWebKeySet
  /** jose key resolver over the published keys: the gateway verifies embedded tokens with it, in-process. */
  readonly getKey: JWTVerifyGetKey
  close(): void
}
