import { describe, expect, it } from 'vitest'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { compileRules, type CompiledRule } from './compile.js'
import { allowedMethods, matchRule } from './match.js'

type RouteSpec = Omit<RouteConfig, 'id' | 'upstream'> & { id?: string }

function configOf(routes: RouteSpec[]): GatewayConfig {
  return {
    upstreams: { up: { url: 'http://127.0.0.1:9' } },
    routes: routes.map((route, index) => ({ id: `r${index}`, upstream: 'up', ...route })),
  }
}

/** A route table that compiled without problems. */
function table(...routes: RouteSpec[]): CompiledRule[] {
  const { rules, problems } = compileRules(configOf(routes))
  expect(problems).toEqual([])
  return rules
}

/** The id of the route that wins, or undefined. */
function winner(rules: readonly CompiledRule[], method: string, path: string): string | undefined {
  return matchRule(rules, method, path)?.id
}

describe('patterns', () => {
  it('matches "*" against exactly one non-empty segment', () => {
    const rules = table({ id: 'star', path: '/a/*' })
    expect(winner(rules, 'GET', '/a/b')).toBe('star')
    expect(winner(rules, 'GET', '/a/b.json')).toBe('star')
    for (const path of ['/a', '/a/', '/a/b/c', '/ab', '/b/a']) expect(winner(rules, 'GET', path), path).toBeUndefined()
  })

  it('matches "**" against any number of segments, zero included', () => {
    const rules = table({ id: 'glob', path: '/a/**' })
    for (const path of ['/a', '/a/', '/a/b', '/a/b/c', '/a/b/c/']) expect(winner(rules, 'GET', path), path).toBe('glob')
    for (const path of ['/ab', '/ab/c', '/b/a', '/']) expect(winner(rules, 'GET', path), path).toBeUndefined()
  })

  it('matches "**" in the middle of a pattern against zero or more segments there', () => {
    const rules = table({ id: 'middle', path: '/a/**/z' })
    for (const path of ['/a/z', '/a/b/z', '/a/b/c/z']) expect(winner(rules, 'GET', path), path).toBe('middle')
    for (const path of ['/a', '/a/b', '/a/z/b', '/az', '/a/bz']) expect(winner(rules, 'GET', path), path).toBeUndefined()
  })

  it('matches "/" only against the root and "/**" against every path', () => {
    const root = table({ id: 'root', path: '/' })
    expect(winner(root, 'GET', '/')).toBe('root')
    expect(winner(root, 'GET', '/a')).toBeUndefined()
    const all = table({ id: 'all', path: '/**' })
    for (const path of ['/', '/a', '/a/b/c']) expect(winner(all, 'GET', path), path).toBe('all')
  })

  it('treats regex characters in a literal segment as themselves', () => {
    const rules = table({ id: 'dotted', path: '/v1.0/(x)+' })
    expect(winner(rules, 'GET', '/v1.0/(x)+')).toBe('dotted')
    expect(winner(rules, 'GET', '/v1x0/(x)+')).toBeUndefined()
    expect(winner(rules, 'GET', '/v1.0/xx')).toBeUndefined()
  })

  it('matches a literal in every spelling an upstream decodes the same way', () => {
    const rules = table({ id: 'custom-method', path: '/v1/things:delete' }, { id: 'accented', path: '/caf%C3%A9' })
    for (const path of ['/v1/things:delete', '/v1/things%3Adelete', '/v1/things%3adelete']) {
      expect(winner(rules, 'POST', path), path).toBe('custom-method')
    }
    for (const path of ['/caf%C3%A9', '/caf%c3%a9', '/caf%C3%a9']) expect(winner(rules, 'GET', path), path).toBe('accented')
    expect(winner(rules, 'GET', '/v1/things;delete')).toBeUndefined()
    expect(winner(rules, 'GET', '/cafe')).toBeUndefined()
  })

  it('matches a literal written encoded in the pattern against the raw character too', () => {
    const rules = table({ id: 'encoded', path: '/users/me%40example.com' }, { id: 'star-char', path: '/a%2Ab' })
    expect(winner(rules, 'GET', '/users/me@example.com')).toBe('encoded')
    expect(winner(rules, 'GET', '/users/me%40example.com')).toBe('encoded')
    expect(winner(rules, 'GET', '/a*b')).toBe('star-char')
    expect(winner(rules, 'GET', '/a%2ab')).toBe('star-char')
    expect(winner(rules, 'GET', '/axb')).toBeUndefined()
  })

  it('compares literal segments case-sensitively', () => {
    const rules = table({ id: 'lower', path: '/admin/**' })
    expect(winner(rules, 'GET', '/Admin/x')).toBeUndefined()
  })
})

describe('the most specific route wins', () => {
  it('prefers a literal segment over "*", whatever the file order', () => {
    for (const rules of [
      table({ id: 'literal', path: '/a/b' }, { id: 'star', path: '/a/*' }),
      table({ id: 'star', path: '/a/*' }, { id: 'literal', path: '/a/b' }),
    ]) {
      expect(winner(rules, 'GET', '/a/b')).toBe('literal')
      expect(winner(rules, 'GET', '/a/c')).toBe('star')
    }
  })

  it('prefers "*" over "**", whatever the file order', () => {
    for (const rules of [
      table({ id: 'glob', path: '/a/**' }, { id: 'star', path: '/a/*' }),
      table({ id: 'star', path: '/a/*' }, { id: 'glob', path: '/a/**' }),
    ]) {
      expect(winner(rules, 'GET', '/a/b')).toBe('star')
      expect(winner(rules, 'GET', '/a/b/c')).toBe('glob')
      expect(winner(rules, 'GET', '/a')).toBe('glob')
    }
  })

  it('compares segments left to right: the first difference decides', () => {
    const rules = table({ id: 'star-literal', path: '/*/b' }, { id: 'literal-star', path: '/a/*' })
    expect(winner(rules, 'GET', '/a/b')).toBe('literal-star')
    const globs = table({ id: 'star-literal', path: '/*/b' }, { id: 'literal-glob', path: '/a/**' })
    expect(winner(globs, 'GET', '/a/b')).toBe('literal-glob')
    expect(winner(globs, 'GET', '/x/b')).toBe('star-literal')
  })

  it('prefers an exact path over a "**" that matches zero segments', () => {
    const rules = table({ id: 'glob', path: '/a/**' }, { id: 'exact', path: '/a' })
    expect(winner(rules, 'GET', '/a')).toBe('exact')
    expect(winner(rules, 'GET', '/a/b')).toBe('glob')
    const root = table({ id: 'everything', path: '/**' }, { id: 'root', path: '/' })
    expect(winner(root, 'GET', '/')).toBe('root')
  })

  it('prefers a pattern that ends over the same pattern followed by "**"', () => {
    const rules = table({ id: 'star-glob', path: '/a/*/**' }, { id: 'star', path: '/a/*' })
    expect(winner(rules, 'GET', '/a/b')).toBe('star')
    expect(winner(rules, 'GET', '/a/b/c')).toBe('star-glob')
  })

  it('prefers a pattern that needs a further segment over one that stops at "**"', () => {
    const rules = table({ id: 'glob', path: '/a/**' }, { id: 'glob-literal', path: '/a/**/z' })
    expect(winner(rules, 'GET', '/a/b/z')).toBe('glob-literal')
    expect(winner(rules, 'GET', '/a/b/y')).toBe('glob')
  })

  it('prefers a method list over "all methods" on the same pattern', () => {
    const rules = table({ id: 'all', path: '/items' }, { id: 'reads', path: '/items', methods: ['GET', 'HEAD'] })
    expect(winner(rules, 'GET', '/items')).toBe('reads')
    expect(winner(rules, 'HEAD', '/items')).toBe('reads')
    expect(winner(rules, 'DELETE', '/items')).toBe('all')
  })

  it('falls through to a less specific route when the more specific one excludes the method', () => {
    const rules = table({ id: 'literal-get', path: '/a/b', methods: ['GET'] }, { id: 'glob', path: '/a/**' })
    expect(winner(rules, 'GET', '/a/b')).toBe('literal-get')
    expect(winner(rules, 'POST', '/a/b')).toBe('glob')
  })

  it('compares methods exactly as sent (a lowercase method matches no list)', () => {
    const rules = table({ id: 'reads', path: '/a', methods: ['GET'] })
    expect(winner(rules, 'get', '/a')).toBeUndefined()
  })
})

describe('allowedMethods', () => {
  it('lists every method some route accepts for the path', () => {
    const rules = table(
      { path: '/orders/*', methods: ['GET', 'HEAD'] },
      { path: '/orders/**', methods: ['POST'] },
      { path: '/other', methods: ['DELETE'] },
    )
    expect(winner(rules, 'PUT', '/orders/1')).toBeUndefined()
    expect(allowedMethods(rules, '/orders/1').sort()).toEqual(['GET', 'HEAD', 'POST'])
  })

  it('is empty for a path no route matches (a 404, not a 405)', () => {
    const rules = table({ path: '/orders/*', methods: ['GET'] })
    expect(allowedMethods(rules, '/nowhere')).toEqual([])
  })
})

describe('compile problems', () => {
  function problemsOf(...routes: RouteSpec[]) {
    return compileRules(configOf(routes)).problems
  }

  it('reports two routes with the same pattern and overlapping methods as a tie', () => {
    expect(problemsOf({ id: 'one', path: '/x/*', methods: ['GET', 'POST'] }, { id: 'two', path: '/x/*', methods: ['POST'] }))
      .toEqual([{ path: ['routes', 1, 'path'], message: 'ties with routes[0] ("one"): same path shape and overlapping methods' }])
  })

  it('reports two all-methods routes with the same pattern as a tie', () => {
    expect(problemsOf({ id: 'one', path: '/y/**' }, { id: 'two', path: '/y/**' }))
      .toEqual([{ path: ['routes', 1, 'path'], message: 'ties with routes[0] ("one"): same path shape and overlapping methods' }])
  })

  it('accepts the same pattern with disjoint method lists, or a method list and all methods', () => {
    expect(problemsOf({ path: '/z', methods: ['GET'] }, { path: '/z', methods: ['POST'] })).toEqual([])
    expect(problemsOf({ path: '/z', methods: ['GET'] }, { path: '/z' })).toEqual([])
  })

  it('reports equally specific patterns that share a path through "**" as a tie', () => {
    expect(problemsOf({ id: 'a', path: '/**/a/**' }, { id: 'b', path: '/**/b/**' })).toEqual([{
      path: ['routes', 1, 'path'],
      message: 'ties with routes[0] ("a"): equally specific, both match some paths, overlapping methods',
    }])
  })

  it('reports a literal and its percent-encoded spelling as a tie', () => {
    expect(problemsOf({ id: 'raw', path: '/v1/things:delete' }, { id: 'encoded', path: '/v1/things%3adelete' }))
      .toEqual([{ path: ['routes', 1, 'path'], message: 'ties with routes[0] ("raw"): same path shape and overlapping methods' }])
  })

  it('does not read an encoded "*" in a literal as a wildcard', () => {
    const rules = table({ id: 'literal-star', path: '/x/%2A' }, { id: 'wildcard', path: '/x/*' })
    expect(winner(rules, 'GET', '/x/*')).toBe('literal-star')
    expect(winner(rules, 'GET', '/x/y')).toBe('wildcard')
  })

  it('accepts equally specific patterns that can never match the same path', () => {
    expect(problemsOf({ path: '/**/a' }, { path: '/**/b' })).toEqual([])
    expect(problemsOf({ path: '/a/*' }, { path: '/b/*' })).toEqual([])
    expect(problemsOf({ path: '/**/a/**', methods: ['GET'] }, { path: '/**/b/**', methods: ['POST'] })).toEqual([])
  })

  it.each([
    ['/files/*.json', 'segment "*.json": "*" and "**" must be whole segments'],
    ['/files/**x', 'segment "**x": "*" and "**" must be whole segments'],
    ['/a/**/**', 'has "**" twice in a row'],
    ['/a//b', 'has an empty segment ("//")'],
    ['/a/../b', 'has a dot-segment'],
    ['/a/./b', 'has a dot-segment'],
    ['/a;x/b', 'segment "a;x" has a character a request path cannot carry'],
    ['/a%2fb', 'segment "a%2fb" has a character a request path cannot carry'],
    ['/%61dmin', 'segment "%61dmin" has a character a request path cannot carry'],
    ['/a\\b', 'segment "a\\b" has a character a request path cannot carry'],
    ['/a b', 'segment "a b" has a character a request path cannot carry'],
  ])('refuses the pattern %s, which no request path could match as written', (path, message) => {
    expect(problemsOf({ path })).toEqual([{ path: ['routes', 0, 'path'], message }])
  })

  it('refuses a route naming an unknown upstream, a duplicate id and scopes on a public route', () => {
    const config = configOf([{ id: 'same', path: '/a' }, { id: 'same', path: '/b', auth: 'none', scopes: { all: ['x'] } }])
    config.routes[0]!.upstream = 'nope'
    expect(compileRules(config).problems).toEqual([
      { path: ['routes', 0, 'upstream'], message: 'unknown upstream "nope"' },
      { path: ['routes', 1, 'id'], message: 'duplicate route id (also routes[0])' },
      { path: ['routes', 1, 'scopes'], message: 'scopes need auth: required or optional' },
    ])
  })
})
