// How the route table's cost grows with its size (a measurement, not a test):
//   npm run build && taskset -c 0 node bench/routes.mjs [--sizes 10,1000,10000] [--lookups 200000]
// For each size, a realistic mix of routes (per service: a static list route, an item route with a path
// parameter and a method list, a single-segment `*` route, a `**` catch-all, and static top-level routes):
//   load     loadConfig on the YAML text: parse, schema, every lint, the compile and its tie check
//            (what `portcullis check`, a start and a hot reload each do), median of 5
//   index    one lookup by the route index (src/rules/route-index.ts), on a mix of paths hitting every kind
//            of route of services spread over the whole table, ns per lookup
//   scan     the same lookups by trying every rule in order (what the index replaced), for comparison
// Prints one JSON line per size and a table.
import { performance } from 'node:perf_hooks'
import { parseArgs } from 'node:util'
import { stringify } from 'yaml'
import { loadConfig } from '../dist/check/load.js'
import { RouteIndex } from '../dist/rules/route-index.js'
import { matchSegments, splitPath } from '../dist/rules/segments.js'

const { values: opts } = parseArgs({ options: { sizes: { type: 'string', default: '10,1000,10000' }, lookups: { type: 'string', default: '200000' } } })
const sizes = opts.sizes.split(',').map(Number)
const LOOKUPS = Number(opts.lookups)

function routesOf(size) {
  const routes = [
    { id: 'health', path: '/health', upstream: 'main', auth: 'none', methods: ['GET'] },
    { id: 'docs', path: '/docs/**', upstream: 'main', auth: 'none' },
  ]
  for (let i = 0; routes.length < size; i++) {
    routes.push(
      { id: `list-${i}`, path: `/svc-${i}/v1/items`, upstream: 'main', methods: ['GET', 'POST'], scopes: { all: ['items:read'] } },
      { id: `item-${i}`, path: `/svc-${i}/v1/items/{id}`, upstream: 'main', methods: ['GET', 'PUT', 'DELETE'] },
      { id: `search-${i}`, path: `/svc-${i}/v1/*/search`, upstream: 'main', methods: ['GET'] },
      { id: `rest-${i}`, path: `/svc-${i}/**`, upstream: 'main' },
    )
  }
  return routes.slice(0, size)
}

function yamlOf(size) {
  return stringify({
    upstreams: { main: { url: 'http://127.0.0.1:9001' } },
    issuers: [{ issuer: 'https://issuer.example.com/', jwks_uri: 'https://issuer.example.com/jwks', audience: ['api'] }],
    routes: routesOf(size),
  })
}

/** Paths hitting each kind of route of services spread over the table, and the methods they come with. */
function lookupsOf(size) {
  const services = Math.max(1, Math.floor((size - 2) / 4))
  const out = []
  for (let k = 0; k < 64; k++) {
    const i = Math.floor((k * 7919) % services)
    out.push(['GET', `/svc-${i}/v1/items`], ['PUT', `/svc-${i}/v1/items/${k}`], ['GET', `/svc-${i}/v1/x/search`], ['POST', `/svc-${i}/other/${k}`])
  }
  return out.map(([method, path]) => [method, splitPath(path)])
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted[Math.floor(sorted.length / 2)]
}

function timeLookups(find, lookups, count = LOOKUPS) {
  let sink = 0
  const start = performance.now()
  for (let n = 0; n < count; n++) {
    const [method, segments] = lookups[n % lookups.length]
    if (find(method, segments) !== undefined) sink++
  }
  const ns = ((performance.now() - start) * 1e6) / count
  if (sink === 0) throw new Error('no lookup matched')
  return ns
}

const rows = []
for (const size of sizes) {
  const text = yamlOf(size)
  const loads = []
  let config
  for (let rep = 0; rep < 5; rep++) {
    const start = performance.now()
    config = loadConfig('routes.yaml', text, {})
    loads.push(performance.now() - start)
  }
  const { compileRules } = await import('../dist/rules/compile.js')
  const { rules } = compileRules(config)
  const index = new RouteIndex(rules)
  const lookups = lookupsOf(size)
  const scan = (method, segments) => rules.find((rule) => (rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments))
  const indexed = (method, segments) => index.match(method, segments)
  // Both agree, and both are warmed up, before anything is timed.
  for (const [method, segments] of lookups) if (indexed(method, segments) !== scan(method, segments)) throw new Error('index and scan disagree')
  timeLookups(indexed, lookups)
  const indexNs = median([1, 2, 3].map(() => timeLookups(indexed, lookups)))
  // The scan of a large table is slow enough that fewer lookups measure it.
  const scanCount = Math.max(1000, Math.min(LOOKUPS, Math.floor(LOOKUPS * 10 / size)))
  const scanNs = median([1, 2, 3].map(() => timeLookups(scan, lookups, scanCount)))
  const row = { size, loadMs: Number(median(loads).toFixed(1)), indexNsPerLookup: Math.round(indexNs), scanNsPerLookup: Math.round(scanNs) }
  rows.push(row)
  console.log(JSON.stringify(row))
}
const base = rows[0]
console.log('\n| routes | load + check (ms) | ratio | index ns/lookup | +ns over the smallest | scan ns/lookup |')
console.log('|---|---|---|---|---|---|')
for (const row of rows) {
  console.log(`| ${row.size.toLocaleString('en')} | ${row.loadMs} | ${(row.loadMs / base.loadMs).toFixed(1)}× | ${row.indexNsPerLookup} | ${row.indexNsPerLookup - base.indexNsPerLookup} | ${row.scanNsPerLookup} |`)
}
