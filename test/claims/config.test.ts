/**
 * Issue 17 at load (`portcullis check`): what the config refuses, with file:line:col and the dotted key,
 * and what it accepts. Named path parameters (`{tenant}`), route and issuer `claims:` conditions, claim
 * paths, `claim_headers` and the issuer keys `preset`, `scope_claim`, `client_id_claim`, `audience_claim`.
 * How the compiled conditions and headers behave at request time is not tested here.
 */
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, type ConfigIssue } from '../../src/check/load.js'
import { compileRules } from '../../src/rules/compile.js'

const FILE = 'portcullis.yaml'

function configError(text: string): ConfigError {
  try {
    loadConfig(FILE, text, {})
  } catch (error) {
    if (error instanceof ConfigError) return error
    throw error
  }
  throw new Error('the config loaded without errors')
}

const issuesOf = (text: string): ConfigIssue[] => configError(text).issues

/** One route `r`: its path on line 6 (the value at col 11); `extra` starts on line 8. */
const route = (path: string, extra = '') =>
  `upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: r\n    path: "${path}"\n    upstream: main\n` + extra

/** A catch-all route and one issuer (`issuers:` on line 8); `extra` starts on line 12, inside the issuer. */
const issuer = (extra: string) => route('/**') +
  'issuers:\n  - issuer: "https://idp.example.com/"\n    jwks_uri: "https://idp.example.com/jwks"\n    audience: ["orders-api"]\n' + extra

/** `claims: { all: [{ claim: <path>, equals: x }] }` on route r: the claim path's value at 10:18. */
const condition = (claim: string) => route('/t', `    claims:\n      all:\n        - claim: '${claim}'\n          equals: x\n`)

const claimPath = (text: string, rest: string) => `claim path ${JSON.stringify(text)} ${rest}`
const QUOTE_HINT = '(quote names with dots, quotes or spaces: ["https://example.com/roles"])'
const RESERVED = 'is a header the gateway sets, strips or frames itself; choose another name'
const authNone = (key: string) => `${key} needs auth: required or optional`

describe('path parameters', () => {
  it('refuses a parameter named twice in one path', () => {
    const error = configError(route('/tenants/{tenant}/users/{tenant}'))
    expect(error.message).toBe(`${FILE}:6:11  routes[0].path: has the path parameter {tenant} twice`)
  })

  it.each(['{}', '{1a}', '{a-b}', 'x{a}', '{a}x', '{a'])('refuses the malformed segment %s', (segment) => {
    expect(issuesOf(route(`/t/${segment}`))).toEqual([{ line: 6, col: 11, path: 'routes[0].path',
      message: `segment "${segment}": a path parameter is a whole segment, {name}, of letters, digits and _ (not starting with a digit)` }])
  })

  it('refuses a parameter between two "**"', () => {
    expect(issuesOf(route('/**/{id}/**'))).toEqual([
      { line: 6, col: 11, path: 'routes[0].path', message: '{id} sits between two "**", so no one segment is it' },
    ])
  })

  it('refuses /t/{a} beside /t/* (a named * ties with *)', () => {
    expect(issuesOf(route('/t/{a}') + '  - id: s\n    path: "/t/*"\n    upstream: main\n')).toEqual([
      { line: 9, col: 11, path: 'routes[1].path', message: 'ties with routes[0] ("r"): same path shape and overlapping methods' },
    ])
  })

  it('accepts /t/{id} beside the literal /t/special, and a parameter after "**"', () => {
    const config = loadConfig(FILE, route('/t/{id}') +
      '  - id: s\n    path: "/t/special"\n    upstream: main\n  - id: u\n    path: "/a/**/{id}"\n    upstream: main\n', {})
    const params = Object.fromEntries(compileRules(config).rules.map((rule) => [rule.id, Object.fromEntries(rule.params)]))
    expect(params).toEqual({ r: { id: { index: 1, fromEnd: false } }, s: {}, u: { id: { index: 1, fromEnd: true } } })
  })
})

describe('claim conditions', () => {
  it('refuses an unknown path parameter, naming the route\'s parameters', () => {
    const claims = '    claims:\n      all:\n        - claim: tenant\n          equals: { param: tenat }\n'
    expect(issuesOf(route('/t/{tenant}/{x}', claims))).toEqual([{ line: 11, col: 28, path: 'routes[0].claims.all[0].equals.param',
      message: 'unknown path parameter "tenat" (did you mean "tenant"?): the route path has {tenant}, {x}' }])
    expect(issuesOf(route('/t', claims))[0]!.message).toBe('unknown path parameter "tenat": the route path has none')
  })

  it('refuses a condition with no operator, and one with two', () => {
    expect(issuesOf(route('/t', '    claims:\n      all:\n        - claim: tenant\n'))).toEqual([
      { line: 10, col: 11, path: 'routes[0].claims.all[0]', message: 'an empty condition: give one of equals, contains, one_of or present' },
    ])
    expect(issuesOf(route('/t', '    claims:\n      any:\n        - claim: tenant\n          equals: a\n          one_of: [a, b]\n'))).toEqual([
      { line: 10, col: 11, path: 'routes[0].claims.any[0]', message: 'give one of equals, contains, one_of or present, not equals and one_of' },
    ])
  })

  it.each(['{}', '{ all: [] }'])('refuses claims: %s', (claims) => {
    expect(issuesOf(route('/t', `    claims: ${claims}\n`))).toEqual([{ line: 8, col: 13, path: 'routes[0].claims',
      message: 'an empty condition: give claims.all or claims.any a condition, or remove claims' }])
  })

  it.each([
    ['a..b', 'has an empty claim name (".." or a leading ".") (at character 3)'],
    ['a.', 'ends with "." (at character 2)'],
    ['roles.a b', `has " " where "." or the end should be (at character 8)`],
    ['a.]b', `has "]" where a claim name should start ${QUOTE_HINT} (at character 3)`],
    ['["unterminated', 'has an unterminated quoted name (at character 1)'],
    ['[unquoted]', 'has "[" without a quoted name after it (write ["name"]) (at character 2)'],
    ['https://example.com/roles', 'looks like a URL: quote a claim name that holds dots, as ["https://example.com/roles"] (at character 1)'],
    ['a.b.c.d.e.f.g.h.i', 'is nested deeper than 8 levels (at character 17)'],
  ])('refuses the claim path %s', (text, rest) => {
    expect(issuesOf(condition(text))).toEqual([
      { line: 10, col: 18, path: 'routes[0].claims.all[0].claim', message: claimPath(text, rest) },
    ])
  })

  it.each(['{ param: x }', '{ header: X-Tenant }'])('refuses %s in an issuer\'s claims (values only)', (operand) => {
    expect(issuesOf(issuer(`    claims:\n      all:\n        - claim: tenant\n          equals: ${operand}\n`))).toEqual([{
      line: 15, col: 19, path: 'issuers[0].claims.all[0].equals',
      message: "an issuer's conditions compare with values only: path parameters and headers belong to a route",
    }])
  })

  it('refuses claims and claim_headers on an auth: none route', () => {
    expect(issuesOf(route('/t', '    auth: none\n    claims:\n      all:\n        - claim: tenant\n          equals: a\n'))).toEqual([
      { line: 10, col: 7, path: 'routes[0].claims', message: authNone('claims') },
    ])
    expect(issuesOf(route('/t', '    auth: none\n    claim_headers:\n      X-Tenant: tenant\n'))).toEqual([
      { line: 10, col: 7, path: 'routes[0].claim_headers', message: authNone('claim_headers') },
    ])
  })
})

describe('claim headers', () => {
  // A bad name is located at the key (col 7), a bad claim path at its value.
  it.each(['Authorization', 'Host', 'Content-Length', 'Cookie', 'X-Forwarded-For', 'Transfer-Encoding', 'X-Auth-Subject', 'x-auth-scopes'])(
    'refuses the reserved name %s', (name) => {
      expect(issuesOf(route('/t', `    claim_headers:\n      "${name}": tenant\n`))).toEqual([
        { line: 9, col: 7, path: `routes[0].claim_headers.${name}`, message: `"${name}" ${RESERVED}` },
      ])
    })

  it('refuses a custom identity header name from forward.identity_headers', () => {
    const text = route('/t', '    claim_headers:\n      X-User: tenant\n') + 'forward:\n  identity_headers:\n    subject: X-User\n'
    expect(issuesOf(text)).toEqual([{ line: 9, col: 7, path: 'routes[0].claim_headers.X-User', message: `"X-User" ${RESERVED}` }])
    expect(() => loadConfig(FILE, route('/t', '    claim_headers:\n      X-User: tenant\n'), {})).not.toThrow()
  })

  it.each(['X Tenant', 'X-Tenant:'])('refuses "%s", not an HTTP token', (name) => {
    expect(issuesOf(route('/t', `    claim_headers:\n      "${name}": tenant\n`))).toEqual([
      { line: 9, col: 7, path: `routes[0].claim_headers.${name}`, message: `"${name}" is not an HTTP header name` },
    ])
  })

  it('refuses two names differing only in case, and a bad claim path', () => {
    expect(issuesOf(route('/t', '    claim_headers:\n      X-Tenant: tenant\n      x-tenant: org\n      X-Org: a..b\n'))).toEqual([
      { line: 10, col: 7, path: 'routes[0].claim_headers.x-tenant', message: '"x-tenant" is "X-Tenant" again (header names ignore case)' },
      { line: 11, col: 14, path: 'routes[0].claim_headers.X-Org', message: claimPath('a..b', 'has an empty claim name (".." or a leading ".") (at character 3)') },
    ])
  })

  it('refuses the same on an issuer', () => {
    expect(issuesOf(issuer('    claim_headers:\n      Cookie: a\n      X-Org: "a."\n      "X Org": b\n'))).toEqual([
      { line: 13, col: 7, path: 'issuers[0].claim_headers.Cookie', message: `"Cookie" ${RESERVED}` },
      { line: 14, col: 14, path: 'issuers[0].claim_headers.X-Org', message: claimPath('a.', 'ends with "." (at character 2)') },
      { line: 15, col: 7, path: 'issuers[0].claim_headers.X Org', message: '"X Org" is not an HTTP header name' },
    ])
  })
})

describe('issuer settings', () => {
  it.each([
    ['preset: google', 13, 'issuers[0].preset', 'must be one of entra, keycloak, auth0, okta, cognito'],
    ['scope_claim: [scope, scope_array]', 18, 'issuers[0].scope_claim', 'give scope or scope_array (the same claim, also as an array), not both'],
    ['scope_claim: [scp, "a..b"]', 24, 'issuers[0].scope_claim[1]', claimPath('a..b', 'has an empty claim name (".." or a leading ".") (at character 3)')],
    ['client_id_claim: "a."', 22, 'issuers[0].client_id_claim', claimPath('a.', 'ends with "." (at character 2)')],
    ['audience_claim: "[x]"', 21, 'issuers[0].audience_claim', claimPath('[x]', 'has "[" without a quoted name after it (write ["name"]) (at character 2)')],
    // A value that fits none of a union's forms: the union's one message, not one per form.
    ['scope_claim: 42', 18, 'issuers[0].scope_claim', 'must be a claim path or a list of claim paths'],
    ['claims: { all: [{ claim: t, equals: { param: a-b } }] }', 41, 'issuers[0].claims.all[0].equals',
      'must be a string, number or boolean, { param: name } or { header: Name }'],
  ])('refuses %s', (line, col, path, message) => {
    expect(issuesOf(issuer(`    ${line}\n`))).toEqual([{ line: 12, col, path, message }])
  })

  // The preset's own conditions are compiled apart: the user's claims.all[0] is reported as all[0].
  it('names the condition as written under a preset that adds its own (cognito)', () => {
    expect(issuesOf(issuer('    preset: cognito\n    claims:\n      all:\n        - claim: "a..b"\n          equals: x\n'))).toEqual([{
      line: 15, col: 18, path: 'issuers[0].claims.all[0].claim',
      message: claimPath('a..b', 'has an empty claim name (".." or a leading ".") (at character 3)'),
    }])
  })
})

describe('valid configs', () => {
  it.each(['entra', 'keycloak', 'auth0', 'okta', 'cognito'])('loads preset: %s with the minimal issuer fields', (preset) => {
    expect(loadConfig(FILE, issuer(`    preset: ${preset}\n`), {}).issuers![0]!.preset).toBe(preset)
  })

  it('loads a full example: params, all/any with literal, param and header operands, claim headers, quoted names', () => {
    const config = loadConfig(FILE, `
upstreams:
  orders: { url: "http://127.0.0.1:9001" }
issuers:
  - issuer: "https://tenant.auth0.example.com/"
    jwks_uri: "https://tenant.auth0.example.com/.well-known/jwks.json"
    audience: ["orders-api"]
    preset: auth0
    scope_claim: [scope, '["https://example.com/roles"]']
    claims:
      any:
        - { claim: '["https://example.com/roles"]', contains: admin }
        - { claim: email_verified, equals: true }
    claim_headers: { X-Roles: '["https://example.com/roles"]' }
  - issuer: "https://keycloak.example.com/realms/shop"
    jwks_uri: "https://keycloak.example.com/realms/shop/protocol/openid-connect/certs"
    audience: ["orders-api"]
    preset: keycloak
    scope_claim: [scope, realm_access.roles, resource_access.orders-api.roles]
    client_id_claim: [azp, client_id]
    audience_claim: resource_access["orders.api"].aud
  - issuer: "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc"
    jwks_uri: "https://cognito-idp.eu-west-1.amazonaws.com/eu-west-1_abc/.well-known/jwks.json"
    audience: ["app-client"]
    preset: cognito
    claims: { all: [{ claim: 'cognito:groups', contains: orders }] }
    claim_headers: { X-Groups: 'cognito:groups' }
routes:
  - id: tenant-orders
    path: "/tenants/{tenant}/orders/**"
    upstream: orders
    claims:
      all:
        - { claim: tenant, equals: { param: tenant } }
        - { claim: org.region, contains: { header: X-Region } }
        - { claim: level, one_of: [1, 2, gold] }
      any:
        - { claim: resource_access.orders-api.roles, contains: orders-reader }
        - { claim: 'resource_access["orders.api"].roles', contains: { param: tenant } }
    claim_headers:
      X-Tenant: tenant
      X-Deep: a.b.c.d.e.f.g.h
  - id: item
    path: "/a/**/{id}"
    upstream: orders
    auth: optional
    claims: { all: [{ claim: owner, equals: { param: id } }] }
  - id: public
    path: "/public/**"
    upstream: orders
    auth: none
`, {})
    const rules = new Map(compileRules(config).rules.map((rule) => [rule.id, rule]))
    const orders = rules.get('tenant-orders')!
    expect(Object.fromEntries(orders.params)).toEqual({ tenant: { index: 1, fromEnd: false } })
    expect([orders.claims!.all.length, orders.claims!.any!.length]).toEqual([3, 2])
    expect(orders.claims!.any![1]!.path.segments).toEqual(['resource_access', 'orders.api', 'roles'])
    expect(orders.claimHeaders!.map((header) => header.name)).toEqual(['x-tenant', 'x-deep'])
    expect(Object.fromEntries(rules.get('item')!.params)).toEqual({ id: { index: 1, fromEnd: true } })
  })
})
