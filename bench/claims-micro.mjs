// The code issue 17 adds to a cache-hit request, measured alone (a measurement, not a test): authorize
// (the scopes, then two claim conditions, one on a path parameter) and the upstream headers (with two claim
// headers), against the same calls for a route with scopes only. `npm run build` first, then
//   taskset -c 0 node bench/claims-micro.mjs
// The end-to-end row is d-claims in `npm run bench`; this isolates the new code from run-to-run noise.
import { compileRules } from '../dist/rules/compile.js'
import { authorize } from '../dist/authz/scopes.js'
import { buildUpstreamHeaders, createHeaderPolicy } from '../dist/forward/upstream-headers.js'
import { compileClaimPlan } from '../dist/claims/plan.js'
import { splitPath } from '../dist/rules/segments.js'
const base = { upstreams: { items: { url: 'http://127.0.0.1:1' } }, issuers: [] }
const plain = { ...base, routes: [{ id: 'items', path: '/api/**', upstream: 'items', scopes: { all: ['items:read'] } }] }
const claims = { ...base, routes: [{ id: 'items', path: '/{area}/**', upstream: 'items', scopes: { all: ['items:read'] },
  claims: { all: [{ claim: 'area', equals: { param: 'area' } }, { claim: 'realm_access.roles', contains: 'items-reader' }] },
  claim_headers: { 'X-Area': 'area', 'X-Roles': 'realm_access.roles' } }] }
const principal = { issuer: 'https://i/', subject: 'u', clientId: 'c', scopes: ['items:read'], expiresAt: 1e10, jti: 'j',
  claims: { area: 'api', realm_access: { roles: ['items-reader', 'auditor'] } } }
const req = { headers: { host: 'x', authorization: 'Bearer abc', accept: '*/*', 'user-agent': 'bench' }, socket: { remoteAddress: '127.0.0.1', localPort: 8080 } }
function setup(config) {
  const { rules } = compileRules(config)
  const plan = compileClaimPlan(config, rules)
  return { rule: rules[0], policy: createHeaderPolicy(undefined, false, { names: plan.headerNames, byIssuer: plan.byIssuer }) }
}
const segments = splitPath('/api/items/42')
function run(label, { rule, policy }, n = 2_000_000) {
  let sink = 0
  for (let i = 0; i < 200_000; i++) { authorize(principal, rule, req.headers, segments); sink += Object.keys(buildUpstreamHeaders(req, principal, policy, rule.claimHeaders)).length }
  const t0 = process.hrtime.bigint()
  for (let i = 0; i < n; i++) { authorize(principal, rule, req.headers, segments); sink += Object.keys(buildUpstreamHeaders(req, principal, policy, rule.claimHeaders)).length }
  const ns = Number(process.hrtime.bigint() - t0) / n
  console.log(label, (ns / 1000).toFixed(3), 'µs per request', sink > 0 ? '' : '(no headers built?)')
  return ns
}
const a = setup(plain), b = setup(claims)
const r = []
for (let k = 0; k < 5; k++) r.push(run('claims', b) - run('plain ', a))
r.sort((x, y) => x - y)
console.log('added by 2 conditions + 2 claim headers, median of 5:', (r[2] / 1000).toFixed(3), 'µs')
