// The request-path code issues 17, 18 and 19 add to a JWT cache hit, measured alone (a measurement, not a test):
// each feature's calls against the same calls on a route without it, in one process, 5 alternating rounds.
//   npm run build && taskset -c 0 node bench/features-micro.mjs
// The end-to-end rows are d-claims, d-cors, d-resource and preflight in `npm run bench`; on this 2-vCPU VM
// their run-to-run spread (±7 µs a rep) is larger than what they measure, which this isolates.
//   claims    authorize (scopes, two claim conditions, one on a path parameter) + the upstream headers with
//             two claim headers
//   resource  authorize on a route of an RFC 9728 resource (the aud check)
//   cors      the CORS answer for an allowed Origin + the response header list with the CORS headers
//   implied   (issue 19) authorize with `scope_implies`, the token holding only a broader scope than the route's
//   mcp-strip (issue 19) the upstream headers of a route with `mcp` (Authorization removed)
//   limit     (issue 21) a rate limit per client in memory: the check and its RateLimit fields
import { compileRules } from '../dist/rules/compile.js'
import { authorize } from '../dist/authz/scopes.js'
import { buildUpstreamHeaders } from '../dist/forward/upstream-headers.js'
import { createHeaderPolicy } from '../dist/forward/header-policy.js'
import { responseHeaderList } from '../dist/forward/response-headers.js'
import { compileClaimPlan } from '../dist/rules/claim-plan.js'
import { splitPath } from '../dist/rules/segments.js'
import { corsAnswer } from '../dist/cors/policy.js'
import { withCorsHeaders } from '../dist/cors/response.js'
import { RateLimiter } from '../dist/ratelimit/limiter.js'
import { Metrics } from '../dist/metrics/metrics.js'

const ORIGIN = 'https://app.example.com'
const base = { server: { listen: '127.0.0.1:8080' }, upstreams: { items: { url: 'http://127.0.0.1:1' } }, issuers: [] }
const plainRoute = { id: 'items', path: '/api/**', upstream: 'items', scopes: { all: ['items:read'] } }
const configs = {
  plain: { ...base, routes: [plainRoute] },
  claims: { ...base, routes: [{ ...plainRoute, path: '/{area}/**',
    claims: { all: [{ claim: 'area', equals: { param: 'area' } }, { claim: 'realm_access.roles', contains: 'items-reader' }] },
    claim_headers: { 'X-Area': 'area', 'X-Roles': 'realm_access.roles' } }] },
  resource: { ...base, routes: [plainRoute], resources: [{ resource: 'http://127.0.0.1:8080', routes: ['items'], audience: ['bench'] }] },
  cors: { ...base, routes: [plainRoute], cors: { allowed_origins: [ORIGIN] } },
  implied: { ...base, routes: [plainRoute], scope_implies: { 'items:admin': ['items:write'], 'items:write': ['items:read'] } },
  'mcp-strip': { ...base, routes: [{ ...plainRoute, mcp: { tools: { '*': { scopes: { all: ['items:read'] } } } } }] },
  limit: { ...base, routes: [plainRoute], rate_limits: { policies: { 'per-client': { limit: 100000000, window: '1s', key: 'client_id' } }, default: ['per-client'] } },
}
const principal = { issuer: 'https://i/', subject: 'u', clientId: 'c', scopes: ['items:read'], expiresAt: 1e10, jti: 'j',
  claims: { aud: 'bench', area: 'api', realm_access: { roles: ['items-reader', 'auditor'] } } }
const adminPrincipal = { ...principal, scopes: ['items:admin'] }
const req = { headers: { host: 'x', authorization: 'Bearer abc', accept: '*/*', 'user-agent': 'bench', origin: ORIGIN },
  socket: { remoteAddress: '127.0.0.1', localPort: 8080 } }
const upstreamResponse = ['content-type', 'application/json', 'content-length', '2', 'date', 'Wed, 25 Nov 2026 16:00:00 GMT']
  .map((value) => Buffer.from(value))
const segments = splitPath('/api/items/42')

function setup(config) {
  const { rules, problems } = compileRules(config)
  if (problems.length > 0) throw new Error(JSON.stringify(problems))
  const plan = compileClaimPlan(config, rules)
  const policy = createHeaderPolicy(undefined, false, { names: plan.headerNames, byIssuer: plan.byIssuer })
  // As src/server/runtime.ts and pipeline.ts choose it.
  const tokenless = { ...policy, removed: new Set([...policy.removed, 'authorization']) }
  const limiter = rules[0].rateLimits === null ? null
    : new RateLimiter({ policies: new Set(rules[0].rateLimits), config: config.rate_limits, metrics: new Metrics(), trustForwarded: false })
  return { rule: rules[0], policy: rules[0].stripAuthorization ? tokenless : policy, principal: config.scope_implies ? adminPrincipal : principal, limiter }
}

/** One cache-hit request's feature-dependent work: authorize, upstream headers, response headers. */
function once({ rule, policy, principal, limiter }) {
  authorize(principal, rule, req.headers, segments)
  const fields = limiter === null ? null : limiter.check({ rule, req, principal }, true)
  const out = buildUpstreamHeaders(req, principal, policy, rule.claimHeaders)
  const list = responseHeaderList(upstreamResponse)
  const answer = rule.cors === null ? null : corsAnswer(rule.cors, ORIGIN, 'GET')
  return Object.keys(out).length + (answer ? withCorsHeaders(list, answer) : list).length + (fields === null ? 0 : fields.length)
}

function nsPerCall(target, n = 1_000_000) {
  let sink = 0
  for (let i = 0; i < 100_000; i++) sink += once(target)
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) sink += once(target)
  if (sink === 0) throw new Error('nothing built')
  return Number(process.hrtime.bigint() - t0) / n
}

const targets = Object.fromEntries(Object.entries(configs).map(([name, config]) => [name, setup(config)]))
const rounds = { claims: [], resource: [], cors: [], implied: [], 'mcp-strip': [], limit: [] }
let plainNs = []
for (let round = 0; round < 5; round++) {
  const plain = nsPerCall(targets.plain)
  plainNs.push(plain)
  for (const name of Object.keys(rounds)) rounds[name].push(nsPerCall(targets[name]) - plain)
}
const median = (values) => [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)]
console.log(`plain route (scopes, identity headers, response headers): ${(median(plainNs) / 1000).toFixed(3)} µs per request`)
for (const [name, extra] of Object.entries(rounds)) console.log(`${name.padEnd(9)} adds ${(median(extra) / 1000).toFixed(3)} µs per request (median of 5 rounds)`)
