import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, loadConfigFile, type ConfigIssue } from '../../src/check/load.js'
import { configWarnings } from '../../src/check/lint.js'
import { parseDuration, parseSize } from '../../src/config/units.js'
import { compileRules } from '../../src/rules/compile.js'
import { CLI, spawnProcess } from '../support/cli.js'
import { minimalConfig } from '../support/config.js'

const FILE = 'portcullis.yaml'

/** Template text without its first newline, so line 1 is the first line written. */
function yaml(text: string): string {
  return text.replace(/^\n/, '')
}

/** The ConfigError that `load` throws; fails the test if it throws nothing or something else. */
function configError(load: () => unknown): ConfigError {
  try {
    load()
  } catch (error) {
    if (error instanceof ConfigError) return error
    throw error
  }
  throw new Error('the config loaded without errors')
}

/** The issues loadConfig reports for this text. */
function issuesOf(text: string, env: NodeJS.ProcessEnv = {}): ConfigIssue[] {
  return configError(() => loadConfig(FILE, text, env)).issues
}

function tempDir(): string {
  return mkdtempSync(path.join(tmpdir(), 'portcullis-config-'))
}

const MINIMAL = minimalConfig()

describe('a valid file', () => {
  it('loads with the values written and no defaults invented', () => {
    const config = loadConfig(FILE, MINIMAL, {})
    expect(config).toEqual({
      upstreams: { main: { url: 'http://127.0.0.1:9001' } },
      routes: [{ id: 'all', path: '/**', upstream: 'main' }],
    })
  })

  it('comes back deeply frozen, so nothing can change it after load', () => {
    const config = loadConfig(FILE, MINIMAL, {})
    expect(Object.isFrozen(config)).toBe(true)
    expect(Object.isFrozen(config.routes)).toBe(true)
    expect(Object.isFrozen(config.routes[0])).toBe(true)
    expect(Object.isFrozen(config.upstreams.main)).toBe(true)
    expect(() => { (config.routes[0] as { auth?: string }).auth = 'none' }).toThrow(TypeError)
    expect(() => { (config.routes as unknown[]).push({}) }).toThrow(TypeError)
    expect(config.routes[0]!.auth).toBeUndefined()
  })

  it('loads config/portcullis.yaml, the default that runs with no setup', () => {
    const config = loadConfigFile('config/portcullis.yaml', {})
    expect(config.routes.map((route) => route.id)).toEqual(['echo-read', 'echo-write', 'public'])
    expect(config.issuers![0]!.jwks_file).toBe(path.resolve('config/dev/jwks.json'))
  })
})

describe('errors name file:line:col and the dotted key', () => {
  it('reports an unknown top-level key at the key', () => {
    expect(issuesOf(MINIMAL + 'colour: red\n')).toEqual([{ line: 8, col: 1, path: 'colour', message: 'unknown key' }])
  })

  it('reports an unknown nested key at the key, with its index in a list', () => {
    expect(issuesOf(yaml(`
upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
  - id: first
    path: "/a"
    upstream: main
  - id: second
    path: "/b"
    upstream: main
    scopes:
      al: ["orders:read"]
`))).toEqual([{ line: 12, col: 7, path: 'routes[1].scopes.al', message: 'unknown key (did you mean "all"?)' }])
  })

  it('reports a bad enum value at the value, listing the allowed ones', () => {
    expect(issuesOf(MINIMAL + '    auth: maybe\n')).toEqual([
      { line: 8, col: 11, path: 'routes[0].auth', message: 'must be one of required, optional, none' },
    ])
  })

  const withIssuer = (extra: string) => MINIMAL + yaml(`
issuers:
  - issuer: "https://idp.example.com/"
    jwks_uri: "https://idp.example.com/jwks"
    audience: ["orders-api"]
`) + extra
  const ALGORITHMS = 'must be one of RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, ES512, EdDSA (none and HS* are never accepted)'

  it('refuses HS256 in algorithms, naming the list item', () => {
    expect(issuesOf(withIssuer('    algorithms: [HS256]\n'))).toEqual([
      { line: 12, col: 18, path: 'issuers[0].algorithms[0]', message: ALGORITHMS },
    ])
  })

  it('refuses none in algorithms, naming the list item', () => {
    expect(issuesOf(withIssuer('    algorithms: [ES256, none]\n'))).toEqual([
      { line: 12, col: 25, path: 'issuers[0].algorithms[1]', message: ALGORITHMS },
    ])
  })

  it('reports a duration written in words', () => {
    expect(issuesOf(withIssuer('    clock_skew: 30 seconds\n'))).toEqual([
      { line: 12, col: 17, path: 'issuers[0].clock_skew', message: 'must be a duration such as 30s, 5m or 1h' },
    ])
  })

  it('reports a size written in words, on the server and on a route', () => {
    expect(issuesOf(MINIMAL + '    max_body_size: 10 megabytes\nserver:\n  max_body_size: 1tb\n')).toEqual([
      { line: 8, col: 20, path: 'routes[0].max_body_size', message: 'must be a size such as 512kb, 10mb or 1gb' },
      { line: 10, col: 18, path: 'server.max_body_size', message: 'must be a size such as 512kb, 10mb or 1gb' },
    ])
  })

  it('reports a route naming an unknown upstream at its upstream key', () => {
    expect(issuesOf(MINIMAL.replace('upstream: main', 'upstream: orders'))).toEqual([
      { line: 7, col: 15, path: 'routes[0].upstream', message: 'unknown upstream "orders"' },
    ])
  })

  it('names a missing key at the object that lacks it', () => {
    expect(issuesOf(MINIMAL.replace('    upstream: main\n', ''))).toEqual([
      { line: 5, col: 5, path: 'routes[0].upstream', message: 'is required' },
    ])
    expect(issuesOf('')).toEqual([
      { line: 1, col: 1, path: 'upstreams', message: 'is required' },
      { line: 1, col: 1, path: 'routes', message: 'is required' },
    ])
  })

  it('reports a value of the wrong type', () => {
    expect(issuesOf(MINIMAL + 'forward:\n  strip_authorization: "yes"\n')).toEqual([
      { line: 9, col: 24, path: 'forward.strip_authorization', message: 'must be boolean' },
    ])
  })

  it('reports a YAML syntax error with its line and column', () => {
    const [issue, ...rest] = issuesOf(yaml(`
upstreams:
  main:
    url: "http://127.0.0.1:9001"
   timeout: 5s
routes: []
`))
    expect(rest).toEqual([])
    expect(issue).toMatchObject({ line: 4, col: 1, path: '' })
    expect(issue!.message).toMatch(/same column/)
  })

  it('reports a duplicate key at the second occurrence, naming it', () => {
    const issues = issuesOf(MINIMAL + '    upstream: main\n')
    expect(issues).toHaveLength(1)
    expect(issues[0]).toMatchObject({ line: 8, col: 5, path: 'routes[0].upstream' })
    expect(issues[0]!.message).toMatch(/unique/)
  })

  it('reports a duplicate top-level key', () => {
    expect(issuesOf(MINIMAL + 'routes: []\n')).toEqual([
      { line: 8, col: 1, path: 'routes', message: expect.stringMatching(/unique/) as string },
    ])
  })

  it('reports an unparseable URL that the schema pattern lets through', () => {
    expect(issuesOf(MINIMAL.replace('127.0.0.1:9001', '127.0.0.1:99999'))).toEqual([
      { line: 3, col: 10, path: 'upstreams.main.url', message: 'is not a valid URL' },
    ])
    expect(issuesOf(withIssuer('').replace('https://idp.example.com/jwks', 'https://[idp/jwks'))).toEqual([
      { line: 10, col: 15, path: 'issuers[0].jwks_uri', message: 'is not a valid URL' },
    ])
  })

  it('reports a listen port above 65535', () => {
    expect(issuesOf(MINIMAL + 'server:\n  listen: "127.0.0.1:70000"\n')).toEqual([
      { line: 9, col: 11, path: 'server.listen', message: 'the port must be at most 65535' },
    ])
  })

  it('takes a log buffer up to 64kb and a flush interval from 10ms to 1m, and reports values outside them', () => {
    expect(loadConfig(FILE, MINIMAL + 'log:\n  buffer: 64kb\n  flush_interval: 10ms\n', {}).log).toEqual({ buffer: '64kb', flush_interval: '10ms' })
    expect(issuesOf(MINIMAL + 'log:\n  buffer: 65kb\n  flush_interval: 5ms\n')).toEqual([
      { line: 9, col: 11, path: 'log.buffer', message: 'must be at most 64kb' },
      { line: 10, col: 19, path: 'log.flush_interval', message: 'must be between 10ms and 1m' },
    ])
    expect(issuesOf(MINIMAL + 'log:\n  buffer: lots\n').map((issue) => issue.path)).toEqual(['log.buffer'])
  })

  it('takes the body and queue bounds of issue 15 and reports values that would refuse every body or wait', () => {
    const server = MINIMAL + 'server:\n  body_buffer_size: 1mb\n  body_timeout: 30s\n  body_min_rate: 0b\n'
    expect(loadConfig(FILE, server, {}).server).toEqual({ body_buffer_size: '1mb', body_timeout: '30s', body_min_rate: '0b' })
    expect(issuesOf(MINIMAL + 'server:\n  body_buffer_size: 17mb\n  body_timeout: 0s\n').map((issue) => issue.path))
      .toEqual(['server.body_buffer_size', 'server.body_timeout'])
    expect(issuesOf(MINIMAL.replace('url: "http://127.0.0.1:9001"', 'url: "http://127.0.0.1:9001"\n    queue_timeout: 0s')).map((issue) => issue.path))
      .toEqual(['upstreams.main.queue_timeout'])
  })

  it('reports every problem in one file, in file order', () => {
    const text = yaml(`
upstreams:
  main:
    url: "http://127.0.0.1:9001"
    timeout: 30 seconds
    colour: red
routes:
  - id: all
    path: "/**"
    upstream: main
    auth: maybe
issuers:
  - issuer: "https://idp.example.com/"
    jwks_uri: "\${JWKS_URI}"
    audience: ["orders-api"]
    algorithms: [HS256]
`)
    const issues = issuesOf(text)
    expect(issues).toEqual([
      { line: 4, col: 14, path: 'upstreams.main.timeout', message: 'must be a duration such as 30s, 5m or 1h' },
      { line: 5, col: 5, path: 'upstreams.main.colour', message: 'unknown key' },
      { line: 10, col: 11, path: 'routes[0].auth', message: 'must be one of required, optional, none' },
      { line: 13, col: 15, path: 'issuers[0].jwks_uri', message: '${JWKS_URI} is not set' },
      { line: 15, col: 18, path: 'issuers[0].algorithms[0]', message: ALGORITHMS },
    ])
    expect(configError(() => loadConfig('conf/gw.yaml', text, {})).message.split('\n')).toEqual([
      'conf/gw.yaml:4:14  upstreams.main.timeout: must be a duration such as 30s, 5m or 1h',
      'conf/gw.yaml:5:5  upstreams.main.colour: unknown key',
      'conf/gw.yaml:10:11  routes[0].auth: must be one of required, optional, none',
      'conf/gw.yaml:13:15  issuers[0].jwks_uri: ${JWKS_URI} is not set',
      `conf/gw.yaml:15:18  issuers[0].algorithms[0]: ${ALGORITHMS}`,
    ])
  })

  it('reports route problems found after the schema passed together', () => {
    expect(issuesOf(yaml(`
upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
  - { id: a, path: "/files/*.json", upstream: main }
  - { id: b, path: "/b", upstream: nope }
`))).toEqual([
      { line: 5, col: 20, path: 'routes[0].path', message: 'segment "*.json": "*" and "**" must be whole segments' },
      { line: 6, col: 36, path: 'routes[1].upstream', message: 'unknown upstream "nope"' },
    ])
  })
})

describe('route ties', () => {
  const routes = (...lines: string[]) => yaml(`
upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
`) + lines.map((line) => `  - ${line}\n`).join('')

  it('refuses two routes with the same pattern and overlapping methods', () => {
    expect(issuesOf(routes(
      '{ id: one, path: "/x/*", methods: [GET, POST], upstream: main }',
      '{ id: two, path: "/x/*", methods: [POST, PUT], upstream: main }',
    ))).toEqual([{ line: 6, col: 22, path: 'routes[1].path', message: 'ties with routes[0] ("one"): same path shape and overlapping methods' }])
  })

  it('refuses two all-methods routes with the same pattern', () => {
    expect(issuesOf(routes(
      '{ id: one, path: "/y/**", upstream: main }',
      '{ id: two, path: "/y/**", upstream: main }',
    ))).toEqual([{ line: 6, col: 22, path: 'routes[1].path', message: 'ties with routes[0] ("one"): same path shape and overlapping methods' }])
  })

  it('accepts the same pattern with a method list and with all methods', () => {
    expect(() => loadConfig(FILE, routes(
      '{ id: one, path: "/z", methods: [GET], upstream: main }',
      '{ id: two, path: "/z", upstream: main }',
    ), {})).not.toThrow()
  })

  it('accepts the same pattern with disjoint method lists', () => {
    expect(() => loadConfig(FILE, routes(
      '{ id: one, path: "/z", methods: [GET], upstream: main }',
      '{ id: two, path: "/z", methods: [POST], upstream: main }',
    ), {})).not.toThrow()
  })
})

describe('issuers', () => {
  const issuer = (keys: string) => MINIMAL + yaml(`
issuers:
  - issuer: "https://idp.example.com/"
    audience: ["orders-api"]
`) + keys

  it('refuses an issuer with both jwks_uri and discovery', () => {
    expect(issuesOf(issuer('    jwks_uri: "https://idp.example.com/jwks"\n    discovery: true\n'))).toEqual([
      { line: 9, col: 5, path: 'issuers[0]', message: 'set only one of jwks_uri, jwks_file or discovery: true' },
    ])
  })

  it('refuses an issuer with neither a key source nor introspection', () => {
    const message = 'set one of jwks_uri, jwks_file or discovery: true, or introspection (or both)'
    expect(issuesOf(issuer(''))).toEqual([{ line: 9, col: 5, path: 'issuers[0]', message }])
    expect(issuesOf(issuer('    discovery: false\n'))).toEqual([{ line: 9, col: 5, path: 'issuers[0]', message }])
  })

  it('accepts an issuer with introspection and no key source', () => {
    const config = loadConfig(FILE, issuer('    introspection:\n      endpoint: "https://idp.example.com/introspect"\n      client_id: gw\n      client_secret: s3cret\n'), {})
    expect(config.issuers![0]!.introspection!.endpoint).toBe('https://idp.example.com/introspect')
  })

  it('accepts discovery alone', () => {
    expect(loadConfig(FILE, issuer('    discovery: true\n'), {}).issuers![0]!.discovery).toBe(true)
  })
})

describe('${VAR} substitution', () => {
  it('replaces ${NAME} with the environment variable, inside a longer string too', () => {
    const text = MINIMAL.replace('http://127.0.0.1:9001', 'http://${UPSTREAM_HOST}:${UPSTREAM_PORT}')
    expect(loadConfig(FILE, text, { UPSTREAM_HOST: '10.1.2.3', UPSTREAM_PORT: '8443' }).upstreams.main!.url)
      .toBe('http://10.1.2.3:8443')
  })

  it('keeps $${NAME} as a literal ${NAME}, even when NAME is set', () => {
    const config = loadConfig(FILE, MINIMAL + 'server:\n  realm: "a$${REALM}b"\n', { REALM: 'substituted' })
    expect(config.server!.realm).toBe('a${REALM}b')
  })

  it('reports a missing variable naming the key, at its value', () => {
    const text = MINIMAL.replace('http://127.0.0.1:9001', '${UPSTREAM_URL}')
    expect(issuesOf(text, { OTHER: 'x' })).toEqual([
      { line: 3, col: 10, path: 'upstreams.main.url', message: '${UPSTREAM_URL} is not set' },
    ])
  })

  it('reports a missing variable inside a list with the item index', () => {
    const text = MINIMAL + yaml(`
issuers:
  - issuer: "https://idp.example.com/"
    jwks_uri: "https://idp.example.com/jwks"
    audience: ["orders-api", "\${SECOND_AUDIENCE}"]
`)
    expect(issuesOf(text)).toEqual([
      { line: 11, col: 30, path: 'issuers[0].audience[1]', message: '${SECOND_AUDIENCE} is not set' },
    ])
  })

  it('refuses a "${" that is not a reference rather than keeping it as literal text', () => {
    const message = 'has a "${" that is not a ${NAME} reference (write $${ for a literal "${")'
    expect(issuesOf(MINIMAL + 'server:\n  realm: "${REALM"\n', { REALM: 'r' })).toEqual([
      { line: 9, col: 10, path: 'server.realm', message },
    ])
    expect(issuesOf(MINIMAL + 'server:\n  realm: "${my-realm}"\n')).toEqual([
      { line: 9, col: 10, path: 'server.realm', message },
    ])
  })

  it('substitutes into values only after parsing, so a value cannot inject YAML', () => {
    const text = MINIMAL + yaml(`
issuers:
  - issuer: "\${ISSUER}"
    jwks_uri: "https://idp.example.com/jwks"
    audience: ["orders-api"]
`)
    const injected = 'https://idp.example.com/"\nadmin:\n  listen: "0.0.0.0:1'
    const config = loadConfig(FILE, text, { ISSUER: injected })
    expect(config.issuers![0]!.issuer).toBe(injected)
    expect(config.admin).toBeUndefined()
  })

  it('substitutes what an alias shares once, so a value holding "${" is never read as a reference', () => {
    const text = MINIMAL + yaml(`
issuers:
  - issuer: "https://a.example.com/"
    jwks_uri: "https://a.example.com/jwks"
    audience: &audience ["\${AUDIENCE}"]
  - issuer: "https://b.example.com/"
    jwks_uri: "https://b.example.com/jwks"
    audience: *audience
`)
    const config = loadConfig(FILE, text, { AUDIENCE: 'orders-${SECRET}', SECRET: 'leaked' })
    expect(config.issuers!.map((entry) => entry.audience)).toEqual([['orders-${SECRET}'], ['orders-${SECRET}']])
  })

  it('keeps a `__proto__` key as a key, which the schema then refuses, instead of a prototype the config inherits from', () => {
    const issues = issuesOf(MINIMAL + 'server:\n  __proto__:\n    realm: from-a-prototype\n')
    expect(issues.map((found) => found.path)).toContain('server.__proto__')
    expect(() => loadConfig(FILE, MINIMAL + 'server:\n  __proto__:\n    realm: from-a-prototype\n')).toThrow(ConfigError)
  })
})

describe('relative paths resolve against the config file directory', () => {
  it('resolves jwks_file, tls files and ca_file, not against the working directory', () => {
    const dir = tempDir()
    mkdirSync(path.join(dir, 'keys'))
    for (const file of ['keys/jwks.json', 'keys/tls.crt', 'keys/tls.key', 'keys/ca.pem']) writeFileSync(path.join(dir, file), '{}')
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, yaml(`
server:
  tls:
    cert_file: keys/tls.crt
    key_file: ./keys/tls.key
upstreams:
  main:
    url: "https://127.0.0.1:9001"
    ca_file: keys/ca.pem
issuers:
  - issuer: "https://idp.example.com/"
    jwks_file: keys/jwks.json
    audience: ["orders-api"]
routes:
  - { id: all, path: "/**", upstream: main }
`))
    const config = loadConfigFile(file, {})
    expect(config.server!.tls).toEqual({ cert_file: path.join(dir, 'keys/tls.crt'), key_file: path.join(dir, 'keys/tls.key') })
    expect(config.upstreams.main!.ca_file).toBe(path.join(dir, 'keys/ca.pem'))
    expect(config.issuers![0]!.jwks_file).toBe(path.join(dir, 'keys/jwks.json'))
  })

  it('reports a relative file that does not exist beside the config, with its resolved path', () => {
    const dir = tempDir()
    const file = path.join(dir, 'portcullis.yaml')
    writeFileSync(file, MINIMAL + yaml(`
issuers:
  - issuer: "https://idp.example.com/"
    jwks_file: missing/jwks.json
    audience: ["orders-api"]
`))
    expect(configError(() => loadConfigFile(file, {})).issues).toEqual([
      { line: 10, col: 16, path: 'issuers[0].jwks_file', message: `cannot read ${path.join(dir, 'missing/jwks.json')}` },
    ])
  })

  it('reports a config file that cannot be read at 1:1', () => {
    const file = path.join(tempDir(), 'absent.yaml')
    expect(configError(() => loadConfigFile(file, {})).issues).toEqual([
      { line: 1, col: 1, path: '', message: expect.stringMatching(/^cannot read the file: ENOENT/) as string },
    ])
  })
})

describe('units', () => {
  it('reads durations in ms, s, m, h and d', () => {
    expect([parseDuration('250ms'), parseDuration('30s'), parseDuration('5m'), parseDuration('1h'), parseDuration('30d')])
      .toEqual([250, 30_000, 300_000, 3_600_000, 2_592_000_000])
    expect(() => parseDuration('30 seconds')).toThrow(TypeError)
  })

  it('reads sizes as binary units: 1kb is 1024 bytes', () => {
    expect([parseSize('512b'), parseSize('1kb'), parseSize('10mb'), parseSize('1gb')]).toEqual([512, 1024, 10 * 1024 ** 2, 1024 ** 3])
    expect(() => parseSize('1tb')).toThrow(TypeError)
  })

  it('gives each route server.max_body_size (default 10mb) unless it sets its own', () => {
    const defaults = compileRules(loadConfig(FILE, MINIMAL, {})).rules
    expect(defaults[0]!.maxBodySize).toBe(10 * 1024 * 1024)
    const text = MINIMAL.replace('routes:', 'server:\n  max_body_size: 2kb\nroutes:') + '  - { id: big, path: "/big", upstream: main, max_body_size: 1mb }\n'
    const rules = compileRules(loadConfig(FILE, text, {})).rules
    expect(Object.fromEntries(rules.map((rule) => [rule.id, rule.maxBodySize]))).toEqual({ all: 2048, big: 1024 * 1024 })
  })
})

describe('configWarnings', () => {
  const warningsFor = (extra: string) => configWarnings(loadConfig(FILE, MINIMAL + extra, {}))

  it('warns about a non-loopback listen without tls', () => {
    expect(warningsFor('server:\n  listen: "0.0.0.0:8080"\n')).toEqual([
      'server.listen 0.0.0.0:8080 is not loopback and server.tls is not set: tokens would cross the network in clear text',
    ])
  })

  it('does not warn about loopback listens', () => {
    for (const listen of ['127.0.0.1:8080', 'localhost:8080', '[::1]:8080']) {
      expect(warningsFor(`server:\n  listen: "${listen}"\n`), listen).toEqual([])
    }
    expect(warningsFor('')).toEqual([])
  })

  it('warns about an http:// issuer and jwks_uri off loopback once allowed, and not on loopback or https', () => {
    const issuers = yaml(`
server:
  allow_insecure_http: true
issuers:
  - issuer: "http://idp.example.com/"
    jwks_uri: "http://idp.example.com/jwks"
    audience: ["a"]
  - issuer: "http://127.0.0.1:9000/"
    jwks_uri: "http://[::1]:9000/jwks"
    audience: ["a"]
  - issuer: "https://secure.example.com/"
    jwks_uri: "https://secure.example.com/jwks"
    audience: ["a"]
  - issuer: "urn:not-a-url"
    jwks_uri: "https://other.example.com/jwks"
    audience: ["a"]
`)
    expect(warningsFor(issuers)).toEqual([
      'issuers[0].issuer uses http:// off loopback (idp.example.com): keys or tokens can be tampered with in transit',
      'issuers[0].jwks_uri uses http:// off loopback (idp.example.com): keys or tokens can be tampered with in transit',
    ])
  })
})

describe('authorization_server', () => {
  const base = (issuer: string) => `upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: all\n    path: "/**"\n    upstream: main\nauthorization_server:\n  enabled: true\n  issuer: "${issuer}"\n  store:\n    type: memory\n`

  it('G-02 warns about an http issuer off loopback (once allowed), not on loopback', async () => {
    const { configWarnings } = await import('../../src/check/lint.js')
    const allowed = `${base('http://auth.example.com')}server:\n  allow_insecure_http: true\n`
    expect(configWarnings(loadConfig('as.yaml', allowed, {})).join('\n')).toMatch(/authorization_server\.issuer uses http:\/\/ off loopback/)
    expect(configWarnings(loadConfig('as.yaml', base('http://127.0.0.1:8080'), {})).join('\n')).not.toMatch(/authorization_server/)
    expect(configWarnings(loadConfig('as.yaml', base('https://auth.example.com'), {}))).toEqual([])
  })

  it('JW-05 warns about a rotation publish delay under 5 minutes', async () => {
    const { configWarnings } = await import('../../src/check/lint.js')
    const text = (delay: string) => `${base('https://auth.example.com')}  signing:\n    rotation_publish_delay: ${delay}\n`
    expect(configWarnings(loadConfig('as.yaml', text('1m'), {})).join('\n')).toMatch(/rotation_publish_delay 1m is under 5m/)
    expect(configWarnings(loadConfig('as.yaml', text('10m'), {}))).toEqual([])
  })

  it('A-06 refuses redirect URIs with a fragment, a wildcard, javascript:, http off loopback, localhost or a bare private scheme', () => {
    const client = (uri: string) => `${base('https://auth.example.com')}  clients:\n    - client_id: web\n      client_secret: "web-secret-0123456789"\n      grant_types: [authorization_code]\n      redirect_uris: ["${uri}"]\n      scopes: [openid]\n`
    for (const uri of ['https://app.example.com/cb#f', 'https://*.example.com/cb', 'JavaScript:alert(1)', 'http://app.example.com/cb', 'http://localhost/cb', 'myapp:/cb', 'cb']) {
      expect(() => loadConfig('as.yaml', client(uri), {}), uri).toThrow(/redirect_uris\[0\]/)
    }
    for (const uri of ['https://app.example.com/cb', 'http://127.0.0.1/cb', 'http://[::1]:8080/cb', 'com.example.app:/cb']) {
      expect(() => loadConfig('as.yaml', client(uri), {}), uri).not.toThrow()
    }
  })

  it('A-13 refuses an authorization_code.ttl over 10 minutes (or under a second), accepts 10m', () => {
    const text = (ttl: string) => `${base('https://auth.example.com')}  authorization_code:\n    ttl: ${ttl}\n`
    expect(() => loadConfig('as.yaml', text('11m'), {})).toThrow(/authorization_server\.authorization_code\.ttl: must be between 1s and 10m/)
    expect(() => loadConfig('as.yaml', text('500ms'), {})).toThrow(/authorization_code\.ttl/)
    expect(() => loadConfig('as.yaml', text('10m'), {})).not.toThrow()
  })

  it('ID-02 refuses an id_token_signed_response_alg the server has no key for (neither RS256 nor signing.algorithm)', () => {
    const text = (alg: string, signing = 'ES256') => `${base('https://auth.example.com')}  signing:\n    algorithm: ${signing}\n  clients:\n    - client_id: web\n      token_endpoint_auth_method: none\n      grant_types: [authorization_code]\n      redirect_uris: ["https://app.example.com/cb"]\n      scopes: [openid]\n      id_token_signed_response_alg: ${alg}\n`
    expect(() => loadConfig('as.yaml', text('EdDSA'), {})).toThrow(/clients\[0\]\.id_token_signed_response_alg: no signing key for EdDSA/)
    for (const [alg, signing] of [['RS256', 'ES256'], ['ES256', 'ES256'], ['EdDSA', 'EdDSA']] as const) {
      expect(() => loadConfig('as.yaml', text(alg, signing), {}), alg).not.toThrow()
    }
  })

  it('CC-04 refuses a user whose subject equals a client_id, and a public client with client_credentials', () => {
    const text = `${base('https://auth.example.com')}  clients:\n    - client_id: alice\n      token_endpoint_auth_method: none\n      grant_types: [client_credentials]\n      scopes: []\n  users:\n    - username: alice\n      password: "pw"\n`
    const error = (() => { try { loadConfig('as.yaml', text, {}); return undefined } catch (e) { return e as Error } })()
    expect(error?.message).toMatch(/users\[0\]\.username: subject "alice" equals a client_id/)
    expect(error?.message).toMatch(/clients\[0\]\.grant_types: client_credentials needs a confidential client/)
  })
})

describe('issue 15 item 12: keys, secrets and tokens never cross the network in clear text unless the file says so', () => {
  const REFUSED = 'use https://, or set server.allow_insecure_http: true'
  const issuer = (lines: string) => MINIMAL + yaml(`
issuers:
  - issuer: "https://idp.example.com/"
    audience: ["a"]
`) + lines

  it('refuses an http:// jwks_uri off loopback, at its line and column', () => {
    expect(issuesOf(issuer('    jwks_uri: "http://keys.example.com/jwks"\n'))).toEqual([{
      line: 11, col: 15, path: 'issuers[0].jwks_uri',
      message: `uses http:// off loopback (keys.example.com): the signing keys could be replaced in transit; ${REFUSED}`,
    }])
  })

  it('refuses an http:// introspection endpoint, a discovery issuer and an embedded issuer off loopback', () => {
    const text = MINIMAL + yaml(`
issuers:
  - issuer: "http://idp.example.com:8080/"
    discovery: true
    audience: ["a"]
    introspection:
      endpoint: "http://10.0.0.5/introspect"
      client_id: gateway
      client_secret: gateway-secret
authorization_server:
  enabled: true
  issuer: "http://auth.example.com"
  store:
    type: memory
`)
    expect(issuesOf(text).map(({ line, col, path: at, message }) => `${line}:${col} ${at}: ${message}`)).toEqual([
      `9:13 issuers[0].issuer: uses http:// off loopback (idp.example.com:8080): the discovery metadata, which names the key set, could be replaced in transit; ${REFUSED}`,
      `13:17 issuers[0].introspection.endpoint: uses http:// off loopback (10.0.0.5): the client secret and every token sent there would cross the network in clear text; ${REFUSED}`,
      `18:11 authorization_server.issuer: uses http:// off loopback (auth.example.com): clients would send their secrets, passwords and tokens in clear text; ${REFUSED}`,
    ])
  })

  it('accepts http:// on loopback (127.0.0.0/8, ::1, localhost), https://, and an http:// issuer that is only compared with iss', () => {
    for (const url of ['http://127.0.0.2:9000/jwks', 'http://[::1]:9000/jwks', 'http://localhost:9000/jwks', 'https://keys.example.com/jwks']) {
      expect(() => loadConfig(FILE, issuer(`    jwks_uri: "${url}"\n`), {}), url).not.toThrow()
    }
    const plainIss = issuer('    jwks_uri: "https://keys.example.com/jwks"\n').replace('https://idp.example.com/', 'http://idp.example.com/')
    expect(configWarnings(loadConfig(FILE, plainIss, {}))).toEqual([
      'issuers[0].issuer uses http:// off loopback (idp.example.com): keys or tokens can be tampered with in transit',
    ])
  })

  it('server.allow_insecure_http: true accepts them, and each is still warned about', () => {
    const text = `server:\n  allow_insecure_http: true\n${issuer('    jwks_uri: "http://keys.example.com/jwks"\n')}`
    expect(configWarnings(loadConfig(FILE, text, {}))).toEqual([
      'issuers[0].jwks_uri uses http:// off loopback (keys.example.com): keys or tokens can be tampered with in transit',
    ])
    expect(issuesOf(`server:\n  allow_insecure_http: "yes"\n${MINIMAL}`)).toEqual([
      { line: 2, col: 24, path: 'server.allow_insecure_http', message: 'must be boolean' },
    ])
  })

  it('portcullis start refuses the file: the problem on stderr, exit 1', async ({ onTestFinished }) => {
    const file = path.join(tempDir(), 'portcullis.yaml')
    writeFileSync(file, `server:\n  listen: "127.0.0.1:0"\n${issuer('    jwks_uri: "http://keys.example.com/jwks"\n')}`)
    const start = spawnProcess(process.execPath, [CLI, 'start', '--config', file], { env: { PATH: process.env.PATH } })
    onTestFinished(() => start.kill())
    const { code } = await start.exited
    expect(code).toBe(1)
    expect(start.output().stderr).toBe(`${file}:13:15  issuers[0].jwks_uri: uses http:// off loopback (keys.example.com): the signing keys could be replaced in transit; ${REFUSED}\n`)
  })
})

describe('issue 15 item 12: a catch-all route without authentication is warned about', () => {
  const routes = (lines: string) => `upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n${lines}`

  it('warns about path "/**" with auth: none', () => {
    expect(configWarnings(loadConfig(FILE, routes('  - { id: orders, path: "/orders/**", upstream: main }\n  - { id: open, path: "/**", upstream: main, auth: none }\n'), {}))).toEqual([
      'routes[1] (open) is a catch-all "/**" with auth: none: every request no other route matches reaches upstream main without a token',
    ])
    expect(configWarnings(loadConfig(FILE, routes('  - { id: open-get, path: "/**", methods: [GET, OPTIONS], upstream: main, auth: none }\n'), {}))).toHaveLength(1)
  })

  it('does not warn about a catch-all that needs a token, a narrower anonymous route, or a preflight-only catch-all', () => {
    const quiet = routes([
      '  - { id: all, path: "/**", upstream: main, auth: optional }',
      '  - { id: public, path: "/public/**", upstream: main, auth: none }',
      '  - { id: preflight, path: "/**", methods: [OPTIONS], upstream: main, auth: none }',
    ].join('\n') + '\n')
    expect(configWarnings(loadConfig(FILE, quiet, {}))).toEqual([])
  })
})

describe('dpop.nonce under server.workers', () => {
  const warningsOf = (extra: string) => configWarnings(loadConfig('portcullis.yaml', minimalConfig(extra), {}))
    .filter((warning) => warning.startsWith('dpop.nonce is on without dpop.nonce_secret'))
  it('says the workers share the primary\'s nonce key when no nonce_secret is set', () => {
    expect(warningsOf('server: { workers: 2 }\ndpop: { nonce: true }\n')).toEqual([expect.stringContaining('the workers share one nonce key the primary makes at start')])
    expect(warningsOf('server: { workers: auto }\ndpop: { nonce: true }\n')).toHaveLength(1)
  })
  it('says nothing with one process, without nonces, or with a nonce_secret', () => {
    expect(warningsOf('dpop: { nonce: true }\n')).toEqual([])
    expect(warningsOf('server: { workers: 2 }\n')).toEqual([])
    expect(warningsOf(`server: { workers: 2 }\ndpop: { nonce: true, nonce_secret: "${'s'.repeat(32)}" }\n`)).toEqual([])
  })
})

describe('server.body_streams_per_address against the pools', () => {
  const warningsOf = (extra: string) => configWarnings(loadConfig('portcullis.yaml', minimalConfig(extra), {}))
    .filter((warning) => warning.startsWith('server.body_streams_per_address'))
  it('warns when one address could hold every streamed body an upstream takes at once', () => {
    expect(warningsOf('')).toEqual([])
    const small = minimalConfig().replace('    url: "http://127.0.0.1:9001"', '    url: "http://127.0.0.1:9001"\n    connections: 8')
    expect(configWarnings(loadConfig('portcullis.yaml', small, {})).filter((warning) => warning.startsWith('server.body_streams_per_address')))
      .toEqual(['server.body_streams_per_address 4 is not under the 4 streamed bodies upstreams.main takes at once (half its connections): one client address could hold them all; lower it or raise connections'])
    expect(warningsOf('server: { body_streams_per_address: 64 }\n')).toHaveLength(1)
    expect(warningsOf('server: { body_streams_per_address: 63 }\n')).toEqual([])
  })
})

describe('certificate-authenticated clients (RFC 8705 §2)', () => {
  const problems = (extra: string): string[] => {
    try {
      loadConfig('portcullis.yaml', minimalConfig(extra), {})
      return []
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      // The PEM files named here do not exist: only what the client settings say is looked at.
      return error.issues.map((issue) => `${issue.path}: ${issue.message}`).filter((problem) => !problem.startsWith('server.tls.'))
    }
  }
  const as = (client: string, tls = '') => `${tls}authorization_server:\n  enabled: true\n  issuer: "https://127.0.0.1:8443"\n  store: { type: memory }\n  clients:\n    - ${client}\n`
  const TLS = 'server: { tls: { cert_file: c.pem, key_file: k.pem, client_certificates: request, client_ca_file: ca.pem } }\n'
  const client = (extra: string) => `{ client_id: svc, grant_types: [client_credentials], scopes: [a], ${extra} }`

  it('tls_client_auth needs the listener to ask, a CA, and exactly one of subject DN or DNS name; no secret', () => {
    expect(problems(as(client('token_endpoint_auth_method: tls_client_auth, tls_client_auth_subject_dn: "CN=svc"'), TLS))).toEqual([])
    expect(problems(as(client('token_endpoint_auth_method: tls_client_auth, tls_client_auth_subject_dn: "CN=svc"'))))
      .toEqual(['authorization_server.clients[0].token_endpoint_auth_method: tls_client_auth needs server.tls with client_certificates: request (the listener must ask for the certificate)',
        'authorization_server.clients[0].token_endpoint_auth_method: tls_client_auth needs server.tls.client_ca_file: the CAs its certificate must chain to'])
    expect(problems(as(client('token_endpoint_auth_method: tls_client_auth'), TLS)))
      .toEqual(['authorization_server.clients[0]: tls_client_auth needs exactly one of tls_client_auth_subject_dn or tls_client_auth_san_dns (RFC 8705 §2.1.2)'])
    expect(problems(as(client('token_endpoint_auth_method: tls_client_auth, tls_client_auth_san_dns: svc.internal, client_secret: "0123456789abcdef0123"'), TLS)))
      .toEqual(['authorization_server.clients[0]: a tls_client_auth client authenticates with its certificate: it has no secret'])
    expect(problems(as(client('client_secret: "0123456789abcdef0123", tls_client_auth_san_dns: svc.internal'), TLS)))
      .toEqual(['authorization_server.clients[0]: tls_client_auth_subject_dn and tls_client_auth_san_dns go with token_endpoint_auth_method: tls_client_auth'])
  })

  it('self_signed_tls_client_auth needs a readable certificate file', () => {
    expect(problems(as(client('token_endpoint_auth_method: self_signed_tls_client_auth'), TLS)))
      .toEqual(['authorization_server.clients[0]: self_signed_tls_client_auth needs self_signed_certificate_file: the certificate the client presents (PEM)'])
    expect(problems(as(client('token_endpoint_auth_method: self_signed_tls_client_auth, self_signed_certificate_file: /nonexistent/cert.pem'), TLS))[0])
      .toMatch(/^authorization_server.clients\[0\].self_signed_certificate_file: is not a readable PEM certificate/)
  })

  it('server.tls.client_ca_file needs client_certificates: request', () => {
    const issues = (() => {
      try {
        loadConfig('portcullis.yaml', minimalConfig('server: { tls: { cert_file: c.pem, key_file: k.pem, client_ca_file: ca.pem } }\n'), {})
        return []
      } catch (error) {
        return (error as ConfigError).issues.map((issue) => `${issue.path}: ${issue.message}`)
      }
    })()
    expect(issues).toContain('server.tls.client_ca_file: needs client_certificates: request')
    expect(issues.some((issue) => issue.startsWith('server.tls.client_ca_file: cannot read'))).toBe(true)
  })
})

describe('one pass: every error of a file at once, with "did you mean"', () => {
  const issues = (text: string): string[] => {
    try {
      loadConfig('portcullis.yaml', text, {})
      return []
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error
      return error.issues.map((issue) => `${issue.line}:${issue.col} ${issue.path}: ${issue.message}`)
    }
  }

  it('a misspelt key and an unknown upstream in one run, each at its line, each with its suggestion', () => {
    expect(issues(`upstreams:
  orders:
    url: "http://127.0.0.1:9001"
routes:
  - id: a
    path: "/a/**"
    upstrem: orders
    upstream: order
`)).toEqual([
      '7:5 routes[0].upstrem: unknown key (did you mean "upstream"?)',
      '8:15 routes[0].upstream: unknown upstream "order" (did you mean "orders"?)',
    ])
  })

  it('values of the wrong type beside a lint problem elsewhere: all of them; an enum with a near miss is named', () => {
    expect(issues(minimalConfig(`  - id: b
    path: "/b/**"
    upstream: main
    auth: optinal
  - id: c
    path: "/c/**"
    upstream: mian
log: { level: 3 }
`))).toEqual([
      '11:11 routes[1].auth: must be one of required, optional, none (did you mean "optional"?)',
      '14:15 routes[2].upstream: unknown upstream "mian" (did you mean "main"?)',
      '15:15 log.level: must be string',
      '15:15 log.level: must be one of fatal, error, warn, info, debug, trace, silent',
    ])
  })

  it('an item missing a required key is cut whole: the other items are still linted, nothing is said of its own references', () => {
    expect(issues(`upstreams:
  main:
    url: "http://127.0.0.1:9001"
routes:
  - id: a
    upstream: nowhere
  - id: b
    path: "/b/**"
    upstream: mian
`)).toEqual([
      '5:5 routes[0].path: is required',
      '9:15 routes[1].upstream: unknown upstream "mian" (did you mean "main"?)',
    ])
  })

  it('the rest is told by its places in the file: paths and the messages that cite an item, after a cut item', () => {
    expect(issues(minimalConfig(`  - id: broken
    path: 17
    upstream: main
  - id: x
    path: "/x/{id}"
    upstream: main
  - id: y
    path: "/x/{key}"
    upstream: main
  - id: x
    path: "/z/**"
    upstream: main
`))).toEqual([
      '9:11 routes[1].path: must be string',
      '15:11 routes[3].path: ties with routes[2] ("x"): same path shape and overlapping methods',
      '17:9 routes[4].id: duplicate route id (also routes[2])',
    ])
  })

  it('a part whose value is wrong under a required key goes up to where it may be absent; what named it is not an echo reported', () => {
    expect(issues(`upstreams:
  main:
    url: "http://127.0.0.1:9001"
  orders:
    url: 9001
routes:
  - id: a
    path: "/a/**"
    upstream: orders
  - id: b
    path: "/b/**"
    upstream: mian
`)).toEqual([
      '5:10 upstreams.orders.url: must be string',
      '12:15 routes[1].upstream: unknown upstream "mian" (did you mean "main"?)',
    ])
  })

  it('a misspelt preset and a misspelt key of an issuer, with a route that refers to a misspelt upstream: all of them', () => {
    expect(issues(minimalConfig(`  - id: b
    path: "/b/**"
    upstream: mian
issuers:
  - issuer: "https://idp.example.com"
    preset: keycloack
    audiance: api
`))).toEqual([
      '10:15 routes[1].upstream: unknown upstream "mian" (did you mean "main"?)',
      '12:5 issuers[0].audience: is required',
      '13:13 issuers[0].preset: must be one of entra, keycloak, auth0, okta, cognito (did you mean "keycloak"?)',
      '14:5 issuers[0].audiance: unknown key (did you mean "audience"?)',
    ])
  })

  it('a root missing a required key cannot be cut: the schema errors alone', () => {
    expect(issues(`routes:
  - id: a
    path: "/a/**"
    upstream: nowhere
`)).toEqual(['1:1 upstreams: is required'])
  })
})
