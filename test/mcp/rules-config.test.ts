/**
 * Issue 19 at load (`portcullis check`): what a route's `mcp:` refuses, at file:line:col and the dotted key,
 * and what it accepts. How the compiled rules behave at request time is test/mcp/rules.test.ts.
 */
import { describe, expect, it } from 'vitest'
import { ConfigError, loadConfig, type ConfigIssue } from '../../src/check/load.js'
import { compileRules } from '../../src/rules/compile.js'
import { compileClaimPlan } from '../../src/rules/claim-plan.js'

const FILE = 'portcullis.yaml'

function issuesOf(text: string): ConfigIssue[] {
  try {
    loadConfig(FILE, text, {})
  } catch (error) {
    if (error instanceof ConfigError) return error.issues
    throw error
  }
  throw new Error('the config loaded without errors')
}

/** One route `mcp` on /mcp; its `mcp:` key on line 8 and `body` from line 9 (indented under it). */
const route = (body: string, extra = '', head = '') =>
  `${head}upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: mcp\n    path: /mcp\n    upstream: main${extra}\n    mcp:\n${body}`

describe('accepted', () => {
  it('loads tools, prompts and methods rules, with "*", and keeps the claims their conditions read', () => {
    const config = loadConfig(FILE, route(
      '      tools:\n' +
      '        delete_order: { scopes: { all: [orders:write] }, claims: { all: [{ claim: department, equals: sales }] } }\n' +
      '        "admin.tools.list": { scopes: { any: [admin, root] } }\n' +
      '        "*": { scopes: { all: [tools:other] } }\n' +
      '      prompts:\n        summarize: { claims: { any: [{ claim: tier, one_of: [gold] }] } }\n' +
      '      methods:\n        resources/read: { scopes: { all: [resources:read] } }\n'), {})
    const { rules, problems } = compileRules(config)
    expect(problems).toEqual([])
    const mcp = rules[0]!.mcp!
    expect([...mcp.methods.keys()]).toEqual(['resources/read'])
    expect([...mcp.named.get('tools/call')!.exact.keys()]).toEqual(['delete_order', 'admin.tools.list'])
    expect(mcp.named.get('tools/call')!.fallback?.label).toBe('mcp.tools.*')
    expect(mcp.named.get('tools/call')!.exact.get('delete_order')!.claims!.all[0]!.label).toBe('mcp.tools.delete_order.claims.all[0]')
    expect(compileClaimPlan(config, rules).kept).toEqual(['department', 'tier'])
  })

  it('compiles a route without mcp to mcp: null (the request path checks that alone)', () => {
    const text = 'upstreams:\n  main:\n    url: "http://127.0.0.1:9001"\nroutes:\n  - id: r\n    path: /r\n    upstream: main\n'
    expect(compileRules(loadConfig(FILE, text, {})).rules[0]!.mcp).toBeNull()
  })
})

describe('refused', () => {
  it('an unknown key in a rule, at its line', () => {
    expect(issuesOf(route('      tools:\n        get_order:\n          scope: { all: [orders:read] }\n'))).toEqual([
      { line: 11, col: 11, path: 'routes[0].mcp.tools.get_order.scope', message: 'unknown key (did you mean "scopes"?)' },
    ])
  })

  it('an unknown key beside tools, prompts and methods', () => {
    expect(issuesOf(route('      resources:\n        "file:///x": { scopes: { all: [a] } }\n'))).toEqual([
      { line: 9, col: 7, path: 'routes[0].mcp.resources', message: 'unknown key' },
    ])
  })

  it('an empty rule, and an empty mcp', () => {
    expect(issuesOf(route('      tools:\n        get_order: {}\n        list: { scopes: { all: [] } }\n'))).toEqual([
      { line: 10, col: 20, path: 'routes[0].mcp.tools.get_order', message: 'an empty rule: give it scopes or claims' },
      { line: 11, col: 15, path: 'routes[0].mcp.tools.list', message: 'an empty rule: give it scopes or claims' },
    ])
    expect(issuesOf(route('      tools: {}\n'))).toEqual([
      { line: 9, col: 7, path: 'routes[0].mcp', message: 'an empty mcp: give tools, prompts or methods a rule, or remove mcp' },
    ])
  })

  it.each([
    ['"delete_*"', 'delete_*', 'a pattern: "*" alone is the rule for names not listed; no other wildcard is supported'],
    ['"get order"', 'get order', 'has whitespace, a control or an invisible formatting character'],
    ['"get\\u200border"', 'get\u200border', 'has whitespace, a control or an invisible formatting character'],
    ['""', '', 'an empty name'],
    [`"${'a'.repeat(129)}"`, 'a'.repeat(129), 'longer than 128 characters'],
  ])('the tool name %s, at the key', (yaml, name, problem) => {
    expect(issuesOf(route(`      tools:\n        ${yaml}: { scopes: { all: [a] } }\n`))).toEqual([
      { line: 10, col: 9, path: `routes[0].mcp.tools.${name}`, message: `tool name ${JSON.stringify(name)}: ${problem}` },
    ])
  })

  it('two names that differ only in case, compatibility form or invisible characters', () => {
    expect(issuesOf(route('      prompts:\n        summarize: { scopes: { all: [a] } }\n        Summarize: { scopes: { all: [b] } }\n' +
      '        "\uff53ummarize": { scopes: { all: [c] } }\n'))).toEqual([
      { line: 11, col: 9, path: 'routes[0].mcp.prompts.Summarize',
        message: '"Summarize" differs from "summarize" only in case, compatibility form or invisible characters: an upstream that matched names loosely could take one for the other' },
      { line: 12, col: 9, path: 'routes[0].mcp.prompts.\uff53ummarize',
        message: '"\uff53ummarize" differs from "summarize" only in case, compatibility form or invisible characters: an upstream that matched names loosely could take one for the other' },
    ])
  })

  it('an unknown method (a typo would otherwise protect nothing)', () => {
    const [issue] = issuesOf(route('      methods:\n        resource/read: { scopes: { all: [a] } }\n'))
    expect(issue).toMatchObject({ line: 10, col: 9, path: 'routes[0].mcp.methods.resource/read' })
    expect(issue!.message).toMatch(/^unknown MCP method "resource\/read" \(did you mean "resources\/read"\?\) \(client methods of MCP 2025-03-26 to 2026-07-28: initialize, .*resources\/read/)
  })

  it('a scope that is not a scope-token, which no token could carry', () => {
    expect(issuesOf(route('      tools:\n        get_order: { scopes: { all: ["orders read"] } }\n'))).toEqual([
      { line: 10, col: 38, path: 'routes[0].mcp.tools.get_order.scopes.all[0]', message: 'must be a scope-token (RFC 6749 §3.3: printable ASCII, no space, " or \\)' },
    ])
  })

  it('claim conditions as a route\'s: an unknown path parameter, an empty claims', () => {
    expect(issuesOf(route('      tools:\n        get_order: { claims: { all: [{ claim: tenant, equals: { param: tenant } }] } }\n        list: { claims: {} }\n'))).toEqual([
      { line: 10, col: 72, path: 'routes[0].mcp.tools.get_order.claims.all[0].equals.param', message: 'unknown path parameter "tenant": the route path has none' },
      { line: 11, col: 25, path: 'routes[0].mcp.tools.list.claims', message: 'an empty condition: give claims.all or claims.any a condition, or remove claims' },
    ])
  })

  it('mcp on an auth: none route', () => {
    expect(issuesOf(route('      tools:\n        get_order: { scopes: { all: [a] } }\n', '\n    auth: none'))).toEqual([
      { line: 10, col: 7, path: 'routes[0].mcp', message: 'mcp needs auth: required or optional' },
    ])
  })

  it('mcp with server.body_buffer_size: 0b (messages are read whole, within it)', () => {
    expect(issuesOf(route('      tools:\n        get_order: { scopes: { all: [a] } }\n', '', 'server:\n  body_buffer_size: 0b\n'))).toEqual([
      { line: 11, col: 7, path: 'routes[0].mcp', message: 'mcp reads each message whole, up to server.body_buffer_size, which is 0: set it (64kb by default)' },
    ])
  })
})
