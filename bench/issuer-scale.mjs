#!/usr/bin/env node
// How the cost grows with issuers and keys (a measurement, not a test):
//
//   npm run build && node --expose-gc bench/issuer-scale.mjs [--issuers 1,10,100] [--keys 1,50] [--tokens 20000]
//
// For each count of issuers × keys per issuer's JWKS (jwks_file, ES256 keys with their kid), in this process
// (dist/authn/authenticator.js): an Authenticator trusting them all, and --tokens distinct tokens spread over every
// issuer and key. Reported: a cold verify (a miss: the issuer found by `iss`, the key by `kid`, the ES256
// signature, the claims), µs each, one after the other; and a cache hit, ns, on 1,000 of those tokens drawn at
// random (a fresh copy of each token, as a request brings it), the median of 3 rounds.
import { createPrivateKey, generateKeyPairSync, sign } from 'node:crypto'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { performance } from 'node:perf_hooks'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values: opts } = parseArgs({
  options: {
    issuers: { type: 'string', default: '1,10,100' },
    keys: { type: 'string', default: '1,50' },
    tokens: { type: 'string', default: '20000' },
  },
})
const ISSUER_COUNTS = opts.issuers.split(',').map(Number)
const KEY_COUNTS = opts.keys.split(',').map(Number)
const TOKENS = Number(opts.tokens)
const HIT_SET = 1000
const LOOKUPS = 200_000

const { Authenticator } = await import(path.join(root, 'dist/authn/authenticator.js'))
const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {}, fatal() {}, child() { return silent }, level: 'silent', silent() {} }
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-issuers-'))
const b64 = (value) => Buffer.from(JSON.stringify(value)).toString('base64url')
const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1]

/** `count` issuers, each with a JWKS file of `keys` ES256 keys: their private keys, to sign with. */
function makeIssuers(count, keys) {
  return Array.from({ length: count }, (_, i) => {
    const issuer = `https://issuer-${i}.bench.invalid/`
    const pairs = Array.from({ length: keys }, (_, k) => {
      const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' })
      return { kid: `key-${i}-${k}`, privateKey: createPrivateKey(privateKey.export({ type: 'pkcs8', format: 'pem' })), publicKey }
    })
    const file = path.join(dir, `jwks-${count}-${keys}-${i}.json`)
    writeFileSync(file, JSON.stringify({ keys: pairs.map(({ kid, publicKey }) => ({ ...publicKey.export({ format: 'jwk' }), kid, alg: 'ES256', use: 'sig' })) }))
    return { issuer, file, pairs }
  })
}

function mint(issuers, count) {
  const iat = Math.floor(Date.now() / 1000)
  return Array.from({ length: count }, (_, t) => {
    const { issuer, pairs } = issuers[t % issuers.length]
    const { kid, privateKey } = pairs[Math.floor(t / issuers.length) % pairs.length]
    const input = `${b64({ alg: 'ES256', kid, typ: 'at+jwt' })}.${b64({ iss: issuer, aud: 'bench', sub: `user-${t}`, client_id: 'bench-client', scope: 'items:read', jti: `jti-${t}`, iat, exp: iat + 7200 })}`
    return `${input}.${sign('sha256', Buffer.from(input), { key: privateKey, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`
  })
}

const rows = []
for (const issuerCount of ISSUER_COUNTS) {
  for (const keyCount of KEY_COUNTS) {
    const issuers = makeIssuers(issuerCount, keyCount)
    const authenticator = new Authenticator({
      issuers: issuers.map(({ issuer, file }) => ({ issuer, jwks_file: file, audience: ['bench'], algorithms: ['ES256'] })),
      cache: { max_entries: TOKENS + issuerCount * keyCount },
      log: silent,
      now: Date.now,
    })
    // Every key set loaded and every key used once, untimed: what is timed is a verify, not a first fetch or import.
    for (const token of mint(issuers, issuerCount * keyCount)) await authenticator.authenticate(token)
    const tokens = mint(issuers, TOKENS)
    globalThis.gc?.()
    const started = performance.now()
    for (const token of tokens) await authenticator.authenticate(token)
    const coldUs = ((performance.now() - started) * 1000) / TOKENS
    const hitSet = tokens.slice(0, HIT_SET)
    const rounds = []
    for (let round = 0; round < 3; round++) {
      const copies = Array.from({ length: LOOKUPS }, () => Buffer.from(hitSet[Math.floor(Math.random() * HIT_SET)], 'latin1').toString('latin1'))
      const begin = performance.now()
      for (const token of copies) {
        if (typeof authenticator.authenticate(token).then === 'function') throw new Error('a lookup missed the cache')
      }
      rounds.push(((performance.now() - begin) * 1e6) / LOOKUPS)
    }
    const row = { issuers: issuerCount, keysPerJwks: keyCount, coldVerifyUs: Number(coldUs.toFixed(1)), hitNs: Math.round(median(rounds)) }
    rows.push(row)
    console.log(JSON.stringify(row))
    await authenticator.close()
  }
}
rmSync(dir, { recursive: true, force: true })
const base = rows[0]
console.log('\n| issuers | keys per JWKS | cache hit (ns) | cold verify (µs) | over 1 issuer, 1 key |')
console.log('|---|---|---|---|---|')
for (const row of rows) {
  console.log(`| ${row.issuers} | ${row.keysPerJwks} | ${row.hitNs} | ${row.coldVerifyUs} | hit ${row.hitNs - base.hitNs >= 0 ? '+' : ''}${row.hitNs - base.hitNs} ns, verify ${row.coldVerifyUs - base.coldVerifyUs >= 0 ? '+' : ''}${(row.coldVerifyUs - base.coldVerifyUs).toFixed(1)} µs |`)
}
