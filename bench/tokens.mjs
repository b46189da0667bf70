// Keys and JWT access tokens for bench/run.mjs and bench/memory.mjs. Tokens are signed with node:crypto
// directly (no jose: minting ~100 000 RS256 tokens must not take minutes) and can be minted on several
// worker threads at once.
import { createHash, createPrivateKey, generateKeyPairSync, randomBytes, sign } from 'node:crypto'
import { URL } from 'node:url'
import { Worker, isMainThread, parentPort, workerData } from 'node:worker_threads'

export const ISSUER = 'https://bench.portcullis.invalid/'
export const AUDIENCE = 'bench'
export const SCOPE = 'items:read'

/** An ES256 (P-256) and an RS256 (2048-bit) key pair: private keys as PEM, public keys as a JWKS. */
export function generateKeys() {
  const es256 = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const rs256 = generateKeyPairSync('rsa', { modulusLength: 2048 })
  return {
    ES256: { kid: 'bench-es256', privatePem: es256.privateKey.export({ type: 'pkcs8', format: 'pem' }) },
    RS256: { kid: 'bench-rs256', privatePem: rs256.privateKey.export({ type: 'pkcs8', format: 'pem' }) },
    jwks: {
      keys: [
        { ...es256.publicKey.export({ format: 'jwk' }), kid: 'bench-es256', alg: 'ES256', use: 'sig' },
        { ...rs256.publicKey.export({ format: 'jwk' }), kid: 'bench-rs256', alg: 'RS256', use: 'sig' },
      ],
    },
  }
}

const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url')

/** `count` distinct tokens (subjects `${prefix}${from}` …), valid for two hours, with the bench scope (and `claims`). */
export function mintTokens(alg, key, { count, from = 0, prefix = 'user-', claims = {} }) {
  const header = b64({ alg, kid: key.kid, typ: 'at+jwt' })
  const iat = Math.floor(Date.now() / 1000)
  // A KeyObject parsed once: passing the PEM to sign() would parse it again for every token.
  const privateKey = createPrivateKey(key.privatePem)
  const options = alg === 'ES256' ? { key: privateKey, dsaEncoding: 'ieee-p1363' } : { key: privateKey }
  const tokens = new Array(count)
  for (let i = 0; i < count; i++) {
    const sub = `${prefix}${from + i}`
    const input = `${header}.${b64({ iss: ISSUER, aud: AUDIENCE, sub, client_id: 'bench-client', scope: SCOPE, jti: `jti-${sub}`, iat, exp: iat + 7200, ...claims })}`
    tokens[i] = `${input}.${sign('sha256', Buffer.from(input), options).toString('base64url')}`
  }
  return tokens
}

/** mintTokens split over `threads` worker threads (the minting is CPU-bound: RS256 signs ~2 600/s a core). */
export async function mintTokensParallel(alg, key, { count, prefix = 'user-', threads = 2 }) {
  const share = Math.ceil(count / threads)
  const parts = await Promise.all(Array.from({ length: threads }, (_, i) => new Promise((resolve, reject) => {
    const part = { count: Math.max(0, Math.min(share, count - i * share)), from: i * share, prefix }
    const worker = new Worker(new URL(import.meta.url), { workerData: { alg, key, part } })
    worker.once('message', resolve)
    worker.once('error', reject)
  })))
  return parts.flat()
}

if (!isMainThread && workerData?.part !== undefined) {
  parentPort.postMessage(mintTokens(workerData.alg, workerData.key, workerData.part))
}

/** A DPoP key (issue 20): P-256, its public JWK and RFC 7638 thumbprint (the members in lexicographic order). */
export function dpopKey() {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
  const { crv, kty, x, y } = publicKey.export({ format: 'jwk' })
  const jwk = { crv, kty, x, y }
  return { privateKey, jwk, jkt: createHash('sha256').update(JSON.stringify(jwk)).digest('base64url') }
}

/** `count` fresh DPoP proofs (RFC 9449 §4.2, ES256), each with its own jti, for one method, URL and access token. */
export function mintDpopProofs(key, { count, htm, htu, accessToken }) {
  const header = b64({ typ: 'dpop+jwt', alg: 'ES256', jwk: key.jwk })
  const ath = createHash('sha256').update(accessToken).digest('base64url')
  const iat = Math.floor(Date.now() / 1000)
  const run = randomBytes(6).toString('base64url')
  const proofs = new Array(count)
  for (let i = 0; i < count; i++) {
    const input = `${header}.${b64({ jti: `${run}-${i}`, htm, htu, iat, ath })}`
    proofs[i] = `${input}.${sign('sha256', Buffer.from(input), { key: key.privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`
  }
  return proofs
}
