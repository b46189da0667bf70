/** `cors:` config errors (issue 18): each names its key and its line and column, as `portcullis check` prints them. */
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, type ConfigIssue } from '../../src/check/load.js'

const FILE = 'portcullis.yaml'

function issuesOf(text: string): ConfigIssue[] {
  try {
    loadConfig(FILE, text.replace(/^\n/, ''), {})
  } catch (error) {
    if (error instanceof ConfigError) return error.issues
    throw error
  }
  throw new Error('the config loaded without errors')
}

/** A file whose line 5 on is `extra` (top-level keys), routes on lines 3-4 (with `route` appended to the route). */
function file(extra: string, route = ''): string {
  return `upstreams: { main: { url: "http://127.0.0.1:9001" } }
routes:
  - { id: api, path: "/api/**", upstream: main, methods: [GET, POST]${route} }
  - { id: other, path: "/other/**", upstream: main, auth: none }
${extra}`
}

/** The one issue of a file with `cors: { allowed_origins: [origin] }`. */
function originIssue(origin: string): string {
  const issues = issuesOf(file(`cors:\n  allowed_origins: [ "${origin}" ]\n`))
  expect(issues.map((issue) => `${issue.line}:${issue.path}`)).toEqual(['6:cors.allowed_origins[0]'])
  return issues[0]!.message
}

describe('allowed_origins', () => {
  it.each([
    ['null', /"null" .* never allowed/],
    ['https://app.example.com/', /trailing slash/],
    ['https://app.example.com/spa', /path, query or fragment/],
    ['https://app.example.com?x=1', /path, query or fragment/],
    ['https://user@app.example.com', /userinfo/],
    ['https://App.Example.com', /lower case/],
    ['https://app.example.com:443', /default port :443/],
    ['http://app.example.com:80', /default port :80/],
    ['https://app.example.com:99999', /bad port/],
    ['app.example.com', /scheme:\/\/host\[:port\]/],
    ['ftp://*.example.com', /scheme:\/\/host\[:port\]/],
    ['https://a.*.example.com', /whole leftmost label only/],
    ['https://*example.com', /whole leftmost label only/],
    ['https://*.*.example.com', /whole leftmost label only/],
    ['https://*', /whole leftmost label only/],
    ['https://*.com', /two labels after "\*\."/],
    // The Public Suffix List, ICANN and private sections: every site under one of them is someone else's.
    ['https://*.co.uk', /public suffix \(Public Suffix List\)/],
    ['https://*.com.au', /public suffix/],
    ['https://*.github.io', /public suffix/],
    ['https://*.herokuapp.com', /public suffix/],
    ['https://*.s3.amazonaws.com', /public suffix/],
    ['http://*.co.uk:8080', /public suffix/],
    ['https://*.10.0.0.1', /DNS name/],
    ['https://app.example.com.', /ends with a dot/],
    ['https://app_1.example.com', /not a DNS name/],
  ])('%s is refused', (origin, message) => {
    expect(originIssue(origin)).toMatch(message)
  })

  it.each(['https://*.example.co.uk', 'https://*.example.com', 'https://*.myapp.github.io', 'https://*.corp.internal:8443'])(
    '%s, a domain registered under a public suffix, is accepted', (origin) => {
      expect(() => loadConfig(FILE, file(`cors:\n  allowed_origins: [ "${origin}" ]\n`).replace(/^\n/, ''), {})).not.toThrow()
    })

  it('may not be empty, nor list "*" beside others', () => {
    expect(issuesOf(file('cors: { allowed_origins: [] }\n')).map((issue) => `${issue.line}:${issue.col} ${issue.path}: ${issue.message}`))
      .toEqual(['5:26 cors.allowed_origins: must list at least one origin (to turn CORS off, leave cors out or set cors: false on a route)'])
    expect(issuesOf(file('cors: { allowed_origins: ["https://a.example", "*"] }\n')).map((issue) => issue.message))
      .toEqual(['"*" allows every origin: list it alone'])
  })

  it('is required at the top level', () => {
    expect(issuesOf(file('cors: { allow_credentials: true }\n')).map((issue) => `${issue.path}: ${issue.message}`))
      .toEqual(['cors.allowed_origins: is required'])
  })
})

describe('credentials', () => {
  it('never go with "*" origins or headers, wherever each is set', () => {
    const top = issuesOf(file('cors:\n  allowed_origins: ["*"]\n  allowed_headers: ["*"]\n  exposed_headers: ["*"]\n  allow_credentials: true\n'))
    expect(top.map((issue) => `${issue.line}:${issue.path}`)).toEqual(['9:cors.allow_credentials', '9:cors.allow_credentials', '9:cors.allow_credentials'])
    expect(top.map((issue) => issue.message).join('\n')).toMatch(/allowed_origins: \["\*"\][^]*"\*" in allowed_headers[^]*"\*" in exposed_headers/)
    const route = issuesOf(file('cors: { allowed_origins: ["*"] }\n', ', cors: { allow_credentials: true }'))
    expect(route.map((issue) => `${issue.line}:${issue.path}`)).toEqual(['3:routes[0].cors.allow_credentials'])
    const fromRoute = issuesOf(file('cors: { allowed_origins: ["https://a.example"], allow_credentials: true }\n', ', cors: { allowed_headers: ["*"] }'))
    expect(fromRoute.map((issue) => issue.path)).toEqual(['routes[0].cors.allowed_headers[0]'])
  })
})

describe('max_age and routes', () => {
  it('caps max_age at 2h', () => {
    expect(issuesOf(file('cors: { allowed_origins: ["https://a.example"], max_age: 3h }\n')).map((issue) => `${issue.path}: ${issue.message}`))
      .toEqual(['cors.max_age: must be at most 2h (7200 s, Chromium\'s own cap)'])
  })

  it('a route\'s cors is checked against the top level and its own methods', () => {
    const cases: Array<[string, string, string[]]> = [
      ['', ', cors: true', ['routes[0].cors: true uses the top-level cors, and there is none']],
      ['', ', cors: { max_age: 1m }', ['routes[0].cors: needs allowed_origins: there is no top-level cors to take them from']],
      ['cors: { allowed_origins: ["https://a.example"] }\n', ', cors: { upstream: true, max_age: 1m }',
        ['routes[0].cors.max_age: does not go with upstream: true (the upstream answers CORS itself, and the gateway adds nothing)']],
      ['cors: { allowed_origins: ["https://a.example"] }\n', ', cors: { allowed_methods: [GET, DELETE] }',
        ['routes[0].cors.allowed_methods[1]: DELETE is not one of the route\'s methods']],
      ['cors: { allowed_origins: ["https://a.example"] }\n', ', cors: { allowed_origin: ["https://b.example"] }', ['routes[0].cors.allowed_origin: unknown key (did you mean "allowed_origins"?)']],
      ['cors: { allowed_origins: ["https://a.example"] }\n', ', cors: "yes"', ['routes[0].cors: must be boolean,object']],
    ]
    for (const [top, route, expected] of cases) {
      expect(issuesOf(file(top, route)).map((issue) => `${issue.path}: ${issue.message}`), route).toEqual(expected)
    }
  })

  it('a valid setup loads, with cors: false and upstream: true routes', () => {
    const config = loadConfig(FILE, file('cors:\n  allowed_origins: ["https://*.example.com", "http://localhost:5173"]\n  max_age: 2h\n',
      ', cors: { upstream: true }'), {})
    expect(config.cors?.allowed_origins).toHaveLength(2)
  })
})
