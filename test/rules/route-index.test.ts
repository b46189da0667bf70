/**
 * The route index (src/rules/route-index.ts) answers exactly what trying every rule in order answers: random tables
 * of a few hundred routes (literals, `*`, `{name}`, `**`, method lists), random paths, both compared; and a 10,000-route
 * table of a realistic mix.
 */
import { describe, expect, it } from 'vitest'
import type { GatewayConfig } from '../../src/config/schema.js'
import { compileRules, type CompiledRule } from '../../src/rules/compile.js'
import { RouteIndex } from '../../src/rules/route-index.js'
import { matchSegments, splitPath } from '../../src/rules/segments.js'
import { random } from '../support/random.js'

const LITERALS = ['api', 'v1', 'v2', 'orders', 'items', 'a', 'b', '']
const METHODS = ['GET', 'POST', 'PUT', 'DELETE']

function config(routes: Array<Record<string, unknown>>): GatewayConfig {
  return { upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes } as unknown as GatewayConfig
}

/** What the index must agree with: the first rule, in table order, whose methods and pattern match. */
function scan(rules: readonly CompiledRule[], method: string, segments: readonly string[]): CompiledRule | undefined {
  return rules.find((rule) => (rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments))
}

describe('the route index', () => {
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    it(`agrees with a scan of the table (seed ${seed})`, () => {
      const next = random(seed)
      const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!
      const routes: Array<Record<string, unknown>> = []
      for (let i = 0; i < 300; i++) {
        const depth = 1 + Math.floor(next() * 4)
        const segments = Array.from({ length: depth }, (_, k) => {
          const roll = next()
          if (roll < 0.6) return pick(LITERALS.slice(0, -1))
          if (roll < 0.75) return '*'
          if (roll < 0.85) return `{p${k}}`
          return '**'
        }).filter((segment, k, all) => !(segment === '**' && all[k - 1] === '**'))
        routes.push({ id: `r${i}`, path: `/${segments.join('/')}`, upstream: 'main', ...(next() < 0.5 && { methods: [pick(METHODS)] }) })
      }
      // Ties and bad patterns are set aside: the table is what compiles.
      const { rules } = compileRules(config(routes))
      const index = RouteIndex.of(rules)
      expect(rules.length).toBeGreaterThan(32)
      for (let n = 0; n < 3000; n++) {
        const depth = Math.floor(next() * 6)
        const path = depth === 0 ? '/' : `/${Array.from({ length: depth }, () => pick(LITERALS)).join('/')}`
        const segments = splitPath(path)
        const method = pick(METHODS)
        expect(index.match(method, segments)?.id, `${method} ${path}`).toBe(scan(rules, method, segments)?.id)
        expect(index.matchingAnyMethod(segments).map((rule) => rule.id).sort())
          .toEqual(rules.filter((rule) => matchSegments(rule.segments, segments)).map((rule) => rule.id).sort())
      }
    })
  }

  it('indexes built one after another share nothing that either changes: the first answers the same after the second is built', () => {
    const tableOf = (seed: number) => {
      const next = random(seed)
      const routes = Array.from({ length: 200 }, (_, i) => ({
        id: `s${seed}-${i}`,
        path: `/${Array.from({ length: 1 + Math.floor(next() * 3) }, () => LITERALS[Math.floor(next() * (LITERALS.length - 1))]).join('/')}/**`,
        upstream: 'main',
        methods: [METHODS[i % METHODS.length]!],
      }))
      return compileRules(config(routes)).rules
    }
    const paths = ['/api', '/api/v1/orders', '/a/b', '/items/x/y', '/v2', '/orders/a'].map(splitPath)
    const first = RouteIndex.of(tableOf(11))
    const answers = () => paths.flatMap((segments) => METHODS.map((method) => first.match(method, segments)?.id))
    const before = answers()
    expect(before.filter((id) => id !== undefined).length).toBeGreaterThan(10)
    const second = RouteIndex.of(tableOf(12))
    expect(answers()).toEqual(before)
    expect(second.match('GET', splitPath('/api/x'))?.id ?? '').not.toMatch(/^s11-/)
  })

  it('10,000 routes of a realistic mix compile with no tie reported, and the index finds each kind (times: bench/routes.mjs)', () => {
    const routes: Array<Record<string, unknown>> = []
    for (let i = 0; i < 2500; i++) {
      routes.push({ id: `list-${i}`, path: `/svc-${i}/v1/items`, upstream: 'main', methods: ['GET'] })
      routes.push({ id: `item-${i}`, path: `/svc-${i}/v1/items/{id}`, upstream: 'main', methods: ['GET', 'PUT', 'DELETE'] })
      routes.push({ id: `any-${i}`, path: `/svc-${i}/v1/*/search`, upstream: 'main' })
      routes.push({ id: `rest-${i}`, path: `/svc-${i}/**`, upstream: 'main' })
    }
    const { rules, problems } = compileRules(config(routes))
    expect(problems).toEqual([])
    expect(rules).toHaveLength(10_000)
    const index = RouteIndex.of(rules)
    expect(index.match('PUT', splitPath('/svc-2499/v1/items/42'))?.id).toBe('item-2499')
    expect(index.match('POST', splitPath('/svc-2499/v1/items/42'))?.id).toBe('rest-2499')
    expect(index.match('GET', splitPath('/svc-17/v1/x/search'))?.id).toBe('any-17')
    expect(index.match('GET', splitPath('/nowhere'))).toBeUndefined()
  })
})
