#!/usr/bin/env node
// Scenario (i) of bench/run.mjs, in a process of its own (a clean heap, nothing else in it):
//
//   node --expose-gc bench/memory.mjs [--entries 100000]
//
// Fills Portcullis' two token caches (dist/authn/authenticator.js, in this process: no gateway in front)
// with `entries` distinct tokens each: the verified-JWT cache with ES256 tokens, the introspection cache
// with opaque tokens answered by a local RFC 7662 endpoint. V8 heap and RSS are read after forced GCs at a
// tenth of the entries and at all of them; the cost per entry is the difference over the entries between.
// The tokens exist before the first reading, so only the caches' cost is counted. Then it sends a tenth more
// distinct tokens to each cache (at least 1 000) and reports the sizes, which must not exceed
// cache.max_entries (= entries). Prints one JSON object on stdout.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { parseArgs } from 'node:util'
import { OPAQUE_ISSUER, createIntrospection } from './servers.mjs'
import { AUDIENCE, ISSUER, generateKeys, mintTokens } from './tokens.mjs'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { values } = parseArgs({ options: { entries: { type: 'string', default: '100000' } } })
const ENTRIES = Number(values.entries)
const EXTRA = Math.max(1000, Math.round(ENTRIES / 10))
// The cost per entry is the slope between WARM and ENTRIES entries: the first tenth also pays for the
// heap's one-off growth (young generation, code), which is no entry's cost.
const WARM = Math.round(ENTRIES / 10)
if (typeof globalThis.gc !== 'function') throw new Error('run with node --expose-gc')

const { Authenticator } = await import(path.join(root, 'dist/authn/authenticator.js'))
const silent = { info() {}, warn() {}, error() {}, debug() {}, trace() {}, fatal() {}, child() { return silent }, level: 'silent', silent() {} }
const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-bench-memory-'))
const keys = generateKeys()
writeFileSync(path.join(dir, 'jwks.json'), JSON.stringify(keys.jwks))

const introspection = createIntrospection()
await new Promise((resolve) => introspection.listen(0, '127.0.0.1', resolve))

const authenticator = new Authenticator({
  issuers: [
    { issuer: ISSUER, jwks_file: path.join(dir, 'jwks.json'), audience: [AUDIENCE], algorithms: ['ES256'] },
    { issuer: OPAQUE_ISSUER, audience: [AUDIENCE], introspection: {
      endpoint: `http://127.0.0.1:${introspection.address().port}/`, client_id: 'gw', client_secret: 'secret', cache_ttl: '1h' } },
  ],
  cache: { max_entries: ENTRIES },
  log: silent,
  now: Date.now,
})

const measure = () => { globalThis.gc(); globalThis.gc(); const m = process.memoryUsage(); return { heap: m.heapUsed, rss: m.rss } }
const size = (name) => authenticator.cacheStats().find((s) => s.name === name).size
async function fill(tokens, batch) {
  for (let i = 0; i < tokens.length; i += batch) {
    await Promise.all(tokens.slice(i, i + batch).map((token) => authenticator.authenticate(token)))
    // The fill's own garbage (HTTP calls, verifications) must not grow the heap, and with it the RSS,
    // beyond what the entries need: collect it as it goes.
    if ((i / batch) % 40 === 39) globalThis.gc()
  }
}

/**
 * Fills one cache with `tokens` (the first WARM before the baseline, up to ENTRIES measured, the rest to
 * overfill the bound) and reports its size, its bound and the cost per entry.
 */
async function measureCache(name, tokens, batch) {
  await fill(tokens.slice(0, WARM), batch)
  const before = measure()
  await fill(tokens.slice(WARM, ENTRIES), batch)
  const after = measure()
  const sizeNow = size(name)
  await fill(tokens.slice(ENTRIES), batch)
  const perEntry = (field) => Math.round((after[field] - before[field]) / (ENTRIES - WARM))
  return {
    size: sizeNow, sizeAfterOverfill: size(name),
    heapBytesPerEntry: perEntry('heap'), rssBytesPerEntry: perEntry('rss'),
    before, after,
  }
}

const jwts = mintTokens('ES256', keys.ES256, { count: ENTRIES + EXTRA })
const jwt = await measureCache('jwt', jwts, 256)
jwts.length = 0
const opaque = Array.from({ length: ENTRIES + EXTRA }, (_, i) => `opaque-${String(i).padStart(8, '0')}-${'x'.repeat(24)}`)
const introspectionResult = await measureCache('introspection', opaque, 64)

await authenticator.close()
introspection.close()
rmSync(dir, { recursive: true, force: true })
console.log(JSON.stringify({
  entries: ENTRIES,
  maxEntries: ENTRIES,
  overfill: EXTRA,
  jwt,
  introspection: introspectionResult,
}))
