import { describe, expect, it } from 'vitest'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { runAtOnce } from '../common/slices.js'
import { compileCorsPolicy } from '../cors/policy.js'
import { compileRuleSteps, compileRules, type CompiledRule } from './compile.js'
import { allowedMethods, matchRule } from './match.js'
import { splitPath } from './segments.js'

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

describe('what rules share', () => {
  it('one methods set per method list in its order, one frozen rank per path shape, and no list of its own for no scopes', () => {
    const rules = table(
      { path: '/a/x', methods: ['GET', 'PUT'] },
      { path: '/b/x', methods: ['GET', 'PUT'] },
      { path: '/c/x', methods: ['PUT', 'GET'] },
      { path: '/d/*', methods: ['GET'] },
    )
    const byId = (id: string) => rules.find((rule) => rule.id === id)!
    expect(byId('r0').methods).toBe(byId('r1').methods)
    expect(byId('r2').methods).not.toBe(byId('r0').methods)
    // A 405's Allow lists a rule's methods in its own order.
    expect([...byId('r2').methods!]).toEqual(['PUT', 'GET'])
    expect(byId('r0').rank).toBe(byId('r2').rank)
    expect(byId('r3').rank).not.toBe(byId('r0').rank)
    expect(Object.isFrozen(byId('r0').rank)).toBe(true)
    expect(byId('r0').scopesAll).toEqual([])
    expect(Object.isFrozen(byId('r0').scopesAll)).toBe(true)
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

describe('splitPath', () => {
  it('splits exactly as path.slice(1).split("/") did, empty segments included', () => {
    const paths = ['/', '', '/a', '/a/', '//', '///a//', '/a/b/c', '/api/items/42', 'x', 'ab/c', '/ä/日本/', `/${'a/'.repeat(300)}`]
    for (const path of paths) expect(splitPath(path), JSON.stringify(path)).toEqual(path.slice(1).split('/'))
  })

  it('still puts the segments in canonical form', () => {
    expect(splitPath('/a%3ab/%2a/x*y/%7e')).toEqual(['a:b', '%2A', 'x%2Ay', '%7E'])
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

  it('looks for ties unless asked not to (a runtime built from a loaded config), and compiles the same table either way', () => {
    const config = configOf([{ id: 'one', path: '/y/**' }, { id: 'two', path: '/y/**' }, { id: 'bad', path: '/a//b' }])
    const checked = compileRules(config)
    const unchecked = runAtOnce(compileRuleSteps(config, { checkTies: false }))
    expect(checked.problems.map((problem) => problem.message)).toEqual(['has an empty segment ("//")',
      'ties with routes[0] ("one"): same path shape and overlapping methods'])
    expect(unchecked.problems.map((problem) => problem.message)).toEqual(['has an empty segment ("//")'])
    expect(unchecked.rules.map((rule) => rule.id)).toEqual(checked.rules.map((rule) => rule.id))
  })

  it('gives routes without a cors of their own the top level\'s policy, one per method list, as compiled for each', () => {
    const cors = { allowed_origins: ['https://app.example.com', 'https://*.example.org'], allow_credentials: true }
    const config = {
      ...configOf([
        { id: 'a', path: '/a', methods: ['GET', 'POST'] }, { id: 'b', path: '/b', methods: ['POST', 'GET'] }, { id: 'c', path: '/c' },
        { id: 'd', path: '/d' }, { id: 'own', path: '/own', cors: { allowed_origins: ['https://other.example.net'] } }, { id: 'off', path: '/off', cors: false },
      ]),
      cors,
    }
    const byId = new Map(compileRules(config).rules.map((rule) => [rule.id, rule]))
    for (const rule of byId.values()) {
      const route = config.routes.find((r) => r.id === rule.id)!
      expect(rule.cors).toEqual(compileCorsPolicy(cors, route.cors, route.methods ? new Set(route.methods) : null))
    }
    expect(byId.get('a')!.cors).toBe(byId.get('b')!.cors)
    expect(byId.get('c')!.cors).toBe(byId.get('d')!.cors)
    expect(byId.get('a')!.cors).not.toBe(byId.get('c')!.cors)
    expect(byId.get('own')!.cors!.exact.has('https://other.example.net')).toBe(true)
    expect(byId.get('off')!.cors).toBeNull()
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

const SUB_DELIMS = "!$&'()*+,=:@"

/** The matcher before segment matching, kept as the reference: the backtracking regex compilePattern built. */
function referenceRegex(pattern: string): RegExp {
  if (pattern === '/') return /^\/$/
  const escapeRegex = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  const escapeSource = (char: string) => '%' + [...char.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')]
    .map((digit) => (/[A-F]/.test(digit) ? `[${digit}${digit.toLowerCase()}]` : digit)).join('')
  const literalSource = (segment: string) => {
    let source = ''
    for (let i = 0; i < segment.length; i++) {
      let char = segment[i]!
      if (char === '%') {
        char = String.fromCharCode(parseInt(segment.slice(i + 1, i + 3), 16))
        i += 2
        if (!SUB_DELIMS.includes(char)) { source += escapeSource(char); continue }
      }
      source += SUB_DELIMS.includes(char) ? `(?:${escapeRegex(char)}|${escapeSource(char)})` : escapeRegex(char)
    }
    return source
  }
  const source = pattern.slice(1).split('/')
    .map((segment) => (segment === '**' ? '(?:/.*)?' : segment === '*' ? '/[^/]+' : '/' + literalSource(segment))).join('')
  return new RegExp(`^${source}$`)
}

/** mulberry32: the same sequence on every run, so a failing case can be replayed. */
function seeded(seed: number): () => number {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}

describe('matching takes time linear in the path', () => {
  it('agrees with the regex it replaced on 10,000 random patterns and paths', () => {
    const random = seeded(15)
    const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!
    const literals = ['a', 'b', 'x:y', 'x%3Ay', 'x%3ay', 'caf%C3%A9', 'caf%c3%a9', '%2A', 'a%2ab', '(v1.0)+', "$&'@"]
    // Beyond the literals' spellings: an empty segment, wildcard look-alikes, and escapes the hygiene refuses.
    const others = ['', 'c', '*', '**', 'a*b', '%', 'x%3', '%zz', '%%3A', 'x%3A%3a', 'caf%C3']
    /** The same characters as `literal`, each sub-delim and escape spelled at random. */
    const respell = (literal: string) => literal.replace(/%[0-9A-Fa-f]{2}|[!$&'()*+,=:@]/g, (piece) => {
      const char = piece.length === 1 ? piece : String.fromCharCode(parseInt(piece.slice(1), 16))
      const hex = char.charCodeAt(0).toString(16)
      const escapes = [`%${hex.toUpperCase()}`, `%${hex}`]
      return pick(SUB_DELIMS.includes(char) ? [char, ...escapes] : escapes)
    })
    const randomPattern = () => {
      const segments: string[] = []
      for (let i = Math.floor(random() * 6); i > 0; i--) {
        const segment = pick(['**', '*', 'literal', 'literal'])
        if (segment === '**' && segments.at(-1) === '**') continue
        segments.push(segment === 'literal' ? pick(literals) : segment)
      }
      if (random() < 0.15) segments.push('')   // a trailing slash; `/` when alone
      return `/${segments.join('/')}`
    }
    const randomSegment = () => (random() < 0.7 ? respell(pick(literals)) : pick(others))
    /** Mostly a path the pattern could match, spelled differently, sometimes with one segment changed. */
    const randomPath = (pattern: string) => {
      if (random() < 0.3) return `/${Array.from({ length: Math.floor(random() * 7) }, randomSegment).join('/')}`
      const segments = pattern.slice(1).split('/').flatMap((segment) => {
        if (segment === '**') return Array.from({ length: Math.floor(random() * 4) }, randomSegment)
        if (segment === '*') return [randomSegment()]
        return [respell(segment)]
      })
      if (random() < 0.3) segments[Math.floor(random() * segments.length)] = randomSegment()
      return `/${segments.join('/')}`
    }
    const mismatches: string[] = []
    let matched = 0
    for (let p = 0; p < 400; p++) {
      const pattern = randomPattern()
      const rules = table({ path: pattern })
      const reference = referenceRegex(pattern)
      for (let q = 0; q < 25; q++) {
        const path = randomPath(pattern)
        const expected = reference.test(path)
        if ((winner(rules, 'GET', path) !== undefined) !== expected) mismatches.push(`${pattern} ${path} should ${expected ? '' : 'not '}match`)
        if (expected) matched++
      }
    }
    expect(mismatches.slice(0, 10)).toEqual([])
    // Both outcomes are well represented, or the comparison proves little.
    expect(matched).toBeGreaterThan(2_000)
    expect(matched).toBeLessThan(8_000)
  })

  it('matches a 16 KiB path against /**/x/**/y/**/z in well under a millisecond', () => {
    const rules = table({ id: 'xyz', path: '/**/x/**/y/**/z' })
    const path = '/x/y'.repeat(4096)   // 16 KiB that never ends in /z: a backtracking regex tries every split
    expect(path).toHaveLength(16_384)
    expect(winner(rules, 'GET', `${path}/z`)).toBe('xyz')
    const times: number[] = []
    for (let run = 0; run < 9; run++) {
      const started = performance.now()
      const rule = matchRule(rules, 'GET', path)
      times.push(performance.now() - started)
      expect(rule).toBeUndefined()
      if (times.at(-1)! > 100) break   // the regex took a minute for one run: no need to wait for nine
    }
    const median = times.sort((a, b) => a - b)[Math.floor(times.length / 2)]!
    // The issue asks for under 1 ms (0.25 ms measured); 5 ms leaves room for a loaded CI machine.
    expect(median).toBeLessThan(5)
  })
})
