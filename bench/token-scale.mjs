#!/usr/bin/env node
// How the cost grows with the tokens in use (a measurement, not a test):
//
//   npm run build && node --expose-gc --max-old-space-size=8192 bench/token-scale.mjs [--sizes 1000,100000,1000000]
//       [--lookups 1000000] [--churn 20000]
//
// For each size N, in this process (dist/authn/authenticator.js, no gateway in front): N distinct ES256 access
// tokens, an Authenticator with `cache.max_entries: N`, filled by verifying every token once. Reported:
// - a cold verify (a miss: decode, ES256 signature, claims, insert), µs, over the first tokens, the cache not full;
// - the heap per cached entry (after forced collections, before and after the fill; the tokens existed before);
// - a cache hit, ns, `authenticate(token)` on tokens drawn at random from all N (hash included, as a request with a
//   token its connection has not sent before pays it; each a fresh copy of the token, made untimed just before, as
//   a request's token is bytes just read), the median of 3 rounds of --lookups;
// - churn: --churn more distinct tokens into the full cache, each a miss that evicts an entry not hit since the
//   eviction hand last passed it (SIEVE), µs each, and its ratio to the cold verify (the goal: an eviction never
//   makes a miss dearer);
// - the floor: a bare Map of the N hashes looked up the same way (hash of a fresh copy, get), ns.
import { hash } from 'node:crypto'
import { performance } from 'node:perf_hooks'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { AUDIENCE, ISSUER, generateKeys, mintTokensParallel } from './tokens.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values: opts } = parseArgs({
  options: {
    sizes: { type: 'string', default: '1000,100000,1000000' },
    lookups: { type: 'string', default: '1000000' },
    churn: { type: 'string', default: '20000' },
  },
})
const SIZES = opts.sizes.split(',').map(Number)
const LOOKUPS = Number(opts.lookups)
const CHURN = Number(opts.churn)
/** Lookups timed together, their tokens copied fresh just before. */
const BATCH = 200
if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc')

const { Authenticator } = await import(path.join(root, 'dist/authn/authenticator.js'))
const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {}, fatal() {}, child() { return silent }, level: 'silent', silent() {} }
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-token-scale-'))
const keys = generateKeys()
const jwksFile = path.join(dir, 'jwks.json')
writeFileSync(jwksFile, JSON.stringify(keys.jwks))
const heap = () => { globalThis.gc(); globalThis.gc(); return process.memoryUsage().heapUsed }
const median = (values) => [...values].sort((a, b) => a - b)[values.length >> 1]

/** Verifies `tokens` one after the other (each a miss): µs each. */
async function verifyEach(authenticator, tokens) {
  const started = performance.now()
  for (const token of tokens) await authenticator.authenticate(token)
  return ((performance.now() - started) * 1000) / tokens.length
}

/**
 * ns per `lookup` of the tokens `picks` names, 3 rounds. Each batch of BATCH is copied fresh first, untimed: a request
 * brings its token in bytes just read, not a string long in the heap.
 */
function timedRounds(tokens, picks, lookup) {
  const batch = new Array(BATCH)
  const rounds = []
  for (let round = 0; round < 3; round++) {
    let elapsed = 0
    for (let from = 0; from < LOOKUPS; from += BATCH) {
      for (let j = 0; j < BATCH; j++) batch[j] = Buffer.from(tokens[picks[(from + j) % LOOKUPS]], 'latin1').toString('latin1')
      const started = performance.now()
      for (let j = 0; j < BATCH; j++) lookup(batch[j])
      elapsed += performance.now() - started
    }
    rounds.push((elapsed * 1e6) / LOOKUPS)
  }
  return rounds
}

const rows = []
for (const size of SIZES) {
  const tokens = await mintTokensParallel('ES256', keys.ES256, { count: size + CHURN, prefix: `n${size}-` })
  const extra = tokens.splice(size)
  const authenticator = new Authenticator({
    issuers: [{ issuer: ISSUER, jwks_file: jwksFile, audience: [AUDIENCE], algorithms: ['ES256'] }],
    cache: { max_entries: size },
    log: silent,
    now: Date.now,
  })
  // The key set loaded, and the verify path compiled, before anything is timed.
  await authenticator.authenticate(extra[0])
  authenticator.invalidate({ all: true })
  const before = heap()
  const coldCount = Math.min(size, 20_000)
  const coldUs = await verifyEach(authenticator, tokens.slice(0, coldCount))
  for (let i = coldCount; i < size; i += 256) {
    await Promise.all(tokens.slice(i, i + 256).map((token) => authenticator.authenticate(token)))
    if ((i >> 8) % 64 === 63) globalThis.gc()
  }
  const after = heap()
  const cached = authenticator.cacheStats().find((stats) => stats.name === 'jwt').size
  // Random draws from every cached token, made before the clock starts.
  const picks = new Uint32Array(LOOKUPS)
  for (let i = 0; i < LOOKUPS; i++) picks[i] = Math.floor(Math.random() * size)
  const rounds = timedRounds(tokens, picks, (token) => {
    if (typeof authenticator.authenticate(token).then === 'function') throw new Error('a lookup missed the cache')
  })
  // The floor of any lookup among N: a bare Map of N token hashes, looked up the same way (hash of a fresh copy, get).
  const bare = new Map(tokens.map((token) => [hash('sha256', token, 'base64url'), { expiresAtMs: Infinity }]))
  const bareRounds = timedRounds(tokens, picks, (token) => {
    if (bare.get(hash('sha256', token, 'base64url')).expiresAtMs < 0) throw new Error('unreachable')
  })
  bare.clear()
  const churnUs = await verifyEach(authenticator, extra.slice(1))
  const row = {
    tokens: size, cached, coldVerifyUs: Number(coldUs.toFixed(1)), heapBytesPerEntry: Math.round((after - before) / size),
    hitNs: Math.round(median(rounds)), hitRoundsNs: rounds.map(Math.round), bareMapNs: Math.round(median(bareRounds)), churnMissUs: Number(churnUs.toFixed(1)),
    churnOverCold: Number((churnUs / coldUs).toFixed(2)), cachedAfterChurn: authenticator.cacheStats().find((stats) => stats.name === 'jwt').size,
  }
  rows.push(row)
  console.log(JSON.stringify(row))
  await authenticator.close()
  tokens.length = 0
  extra.length = 0
}
rmSync(dir, { recursive: true, force: true })

const first = rows[0]
console.log('\n| tokens cached | cache hit (ns) | over the smallest | a bare Map, same lookups (ns) | heap per entry | cold verify (µs) | a miss that evicts (µs) | over a cold verify |')
console.log('|---|---|---|---|---|---|---|---|')
for (const row of rows) {
  console.log(`| ${row.tokens.toLocaleString('en')} | ${row.hitNs} | +${row.hitNs - first.hitNs} ns (${(row.hitNs / first.hitNs).toFixed(2)}×) | ${row.bareMapNs} (+${row.bareMapNs - first.bareMapNs}) | ${row.tokens >= 10_000 ? `${row.heapBytesPerEntry} B` : '— (too few to weigh)'} | ${row.coldVerifyUs} | ${row.churnMissUs} | ${row.churnOverCold}× |`)
}
