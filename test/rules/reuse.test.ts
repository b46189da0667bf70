/**
 * A reload keeps what it did not change: a route that is the same object as one in service keeps its compiled rule
 * (rules/compile.ts, ReusableRules), and the index keeps its tree when every position files the same literal prefix
 * (route-index.ts). Random tables and random edits (a route changed in place, its path changed, one inserted, one
 * removed, two swapped): the table built with the previous one equals the table compiled afresh, and its index
 * answers what a scan of it answers.
 */
import { describe, expect, it } from 'vitest'
import type { GatewayConfig, RouteConfig } from '../../src/config/schema.js'
import { runAtOnce } from '../../src/common/slices.js'
import { compileRules, compileRuleSteps, type ReusableRules } from '../../src/rules/compile.js'
import { RouteIndex } from '../../src/rules/route-index.js'
import { matchSegments, splitPath } from '../../src/rules/segments.js'
import { random } from '../support/random.js'

const LITERALS = ['api', 'v1', 'orders', 'items', 'a', 'b']
const METHODS = ['GET', 'POST', 'PUT', 'DELETE']

function config(routes: readonly RouteConfig[]): GatewayConfig {
  return { upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes } as unknown as GatewayConfig
}

function route(next: () => number, id: string): RouteConfig {
  const pick = <T>(items: readonly T[]): T => items[Math.floor(next() * items.length)]!
  const segments = Array.from({ length: 1 + Math.floor(next() * 3) }, () => pick(LITERALS))
  const last = next()
  const tail = last < 0.4 ? '/**' : last < 0.6 ? '/{id}' : last < 0.7 ? '/*/x' : ''
  return Object.freeze({
    id, path: `/${segments.join('/')}${tail}`, upstream: 'main',
    ...(next() < 0.5 && { methods: [pick(METHODS)] }), scopes: { all: [`s${Math.floor(next() * 5)}`] },
  }) as RouteConfig
}

/** A table with no ties: routes that would tie an earlier one are left out. */
function table(next: () => number, count: number, prefix: string): RouteConfig[] {
  const routes: RouteConfig[] = []
  for (let i = 0; routes.length < count; i++) {
    const candidate = route(next, `${prefix}${i}`)
    if (compileRules(config([...routes, candidate])).problems.length === 0) routes.push(candidate)
  }
  return routes
}

/** The table compiled from `next`, a route that is one of `previous`'s keys taking its rule. */
function rebuilt(previous: ReusableRules, next: readonly RouteConfig[]) {
  return runAtOnce(compileRuleSteps(config(next), { checkTies: false, reuse: previous }))
}

describe('a reload keeps the rules of the routes it did not change', () => {
  for (const seed of [1, 2, 3, 4]) {
    it(`random edits give the table and index a fresh compile gives (seed ${seed})`, () => {
      const next = random(seed)
      let routes = table(next, 120, 'r')
      let compiled = compileRules(config(routes))
      let index = RouteIndex.of(compiled.rules)
      for (let edit = 0; edit < 12; edit++) {
        const edited = [...routes]
        const at = Math.floor(next() * edited.length)
        const kind = edit % 5
        if (kind === 0) edited[at] = Object.freeze({ ...edited[at]!, scopes: { all: ['changed'] } })
        else if (kind === 1) edited[at] = Object.freeze({ ...edited[at]!, path: `/moved-${edit}/**` })
        else if (kind === 2) edited.splice(at, 0, Object.freeze({ id: `new${edit}`, path: `/new-${edit}/{id}`, upstream: 'main' }) as RouteConfig)
        else if (kind === 3) edited.splice(at, 1)
        else [edited[0], edited[at]] = [edited[at]!, edited[0]!]
        const built = rebuilt(compiled.byRoute, edited)
        const kept = built.rules
        const fresh = compileRules(config(edited))
        expect(fresh.problems).toEqual([])
        expect(kept).toEqual(fresh.rules)
        expect(built.kept).toBe(edited.filter((route) => compiled.byRoute.has(route)).length)
        expect(built.kept).toBeGreaterThanOrEqual(edited.length - 2)
        // Each unchanged route at its place keeps its very rule; one that moved has a copy with its place, its fields in
        // the compile's order (one object shape for the match to read).
        for (const rule of kept) {
          const before = compiled.byRoute.get(edited[rule.index]!)
          if (before === undefined) continue
          if (before.index === rule.index) expect(rule).toBe(before)
          else expect(rule).toEqual({ ...before, index: rule.index })
          expect(Object.keys(rule)).toEqual(Object.keys(fresh.rules[0]!))
        }
        const nextIndex = runAtOnce(RouteIndex.steps(kept, index))
        for (let n = 0; n < 400; n++) {
          const depth = Math.floor(next() * 5)
          const path = `/${Array.from({ length: depth }, () => LITERALS[Math.floor(next() * LITERALS.length)]).join('/')}`
          const segments = splitPath(path)
          const method = METHODS[n % METHODS.length]!
          const scanned = kept.find((rule) => (rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments))
          expect(nextIndex.match(method, segments)?.id, `${method} ${path}`).toBe(scanned?.id)
        }
        for (const [i, changed] of edited.entries()) {
          if (changed.path.startsWith('/moved-') || changed.path.startsWith('/new-')) {
            expect(nextIndex.match(changed.methods?.[0] ?? 'GET', splitPath(changed.path.replace('/**', '/x').replace('{id}', '7')))?.id, `routes[${i}]`).toBe(changed.id)
          }
        }
        routes = edited
        compiled = built
        index = nextIndex
      }
    })
  }

  it('a route that is equal but another object is compiled again (only the loader says two routes are the same)', () => {
    const routes = table(random(9), 40, 'q')
    const { rules, byRoute } = compileRules(config(routes))
    const copies = routes.map((one) => Object.freeze({ ...one }) as RouteConfig)
    const kept = rebuilt(byRoute, copies).rules
    expect(kept).toEqual(rules)
    for (const rule of kept) expect(rules).not.toContain(rule)
  })

  it('a route object that is not frozen is compiled again: it may have changed since its rule was made', () => {
    const open = { id: 'm', path: '/m/**', upstream: 'main' } as { id: string; path: string; upstream: string }
    const first = compileRules(config([open as RouteConfig]))
    open.path = '/changed/**'
    const [rule] = rebuilt(first.byRoute, [open as RouteConfig]).rules
    expect(rule!.path).toBe('/changed/**')
    expect(rule).not.toBe(first.rules[0])
  })

  it('the index keeps its tree only while every position files the same prefix: a changed path is found at once', () => {
    const routes = Array.from({ length: 40 }, (_, i) => Object.freeze({ id: `p${i}`, path: `/svc-${i}/items/**`, upstream: 'main' }) as RouteConfig)
    const compiled = compileRules(config(routes))
    const index = RouteIndex.of(compiled.rules)
    // Same shapes, ids changed: the same tree serves, with the new rules.
    const renamed = routes.map((one) => Object.freeze({ ...one, id: `${one.id}-b` }) as RouteConfig)
    const renamedRules = rebuilt(compiled.byRoute, renamed)
    const renamedIndex = runAtOnce(RouteIndex.steps(renamedRules.rules, index))
    expect(renamedIndex.match('GET', splitPath('/svc-3/items/x'))?.id).toBe('p3-b')
    // One path changed, same length, same rank: the old tree would file it under /svc-3/items and never find it.
    const moved = renamed.map((one, i) => i === 3 ? Object.freeze({ ...one, path: '/elsewhere/items/**' }) as RouteConfig : one)
    const movedRules = rebuilt(renamedRules.byRoute, moved)
    const movedIndex = runAtOnce(RouteIndex.steps(movedRules.rules, renamedIndex))
    expect(movedIndex.match('GET', splitPath('/elsewhere/items/x'))?.id).toBe('p3-b')
    expect(movedIndex.match('GET', splitPath('/svc-3/items/x'))).toBeUndefined()
    expect(renamedIndex.match('GET', splitPath('/svc-3/items/x'))?.id).toBe('p3-b')
  })
})
