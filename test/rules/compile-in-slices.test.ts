/**
 * A hot reload compiles the route table a slice at a time (src/common/slices.ts, compileRuleSteps): the table and
 * the problems are the same as compiling it at once, and the event loop gets a turn between slices.
 */
import { describe, expect, it } from 'vitest'
import type { GatewayConfig } from '../../src/config/schema.js'
import { runAtOnce, runInSlices } from '../../src/common/slices.js'
import { compileRules, compileRuleSteps } from '../../src/rules/compile.js'

function config(count: number): GatewayConfig {
  const routes: Array<Record<string, unknown>> = []
  for (let i = 0; i < count; i++) {
    routes.push({ id: `r${i}`, path: i % 3 === 0 ? `/svc-${i}/**` : i % 3 === 1 ? `/svc-${i}/items/{id}` : `/svc-${i}/*/search`, upstream: 'main',
      ...(i % 2 === 0 && { methods: ['GET', 'PUT'] }), scopes: { all: [`s${i % 7}`] } })
  }
  // Problems late in the table, found only once every slice has run: a bad path, a tie, an unknown upstream.
  routes.push({ id: 'bad', path: '/svc-1/it*ms', upstream: 'main' })
  routes.push({ id: 'tie', path: '/svc-1995/**', upstream: 'main' }) // as routes[1995]: odd (no methods), a multiple of 3 (`**`)
  routes.push({ id: 'lost', path: '/lost', upstream: 'nowhere' })
  return { upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes } as unknown as GatewayConfig
}

describe('compiling the route table in slices', () => {
  it('gives the same table and problems as at once, with a place to pause every 25 routes', async () => {
    const table = config(2_000) // the tie below needs routes[1995]
    const atOnce = compileRules(table)
    let pauses = 0
    let turns = 0
    const sliced = await runInSlices(compileRuleSteps(table), async () => {
      pauses++
      // A macrotask between slices: a timer set now fires before the next slice runs.
      await new Promise<void>((resolve) => setTimeout(() => { turns++; resolve() }, 0))
    }, 0)
    expect(pauses).toBeGreaterThanOrEqual(2_003 / 25)
    expect(turns).toBe(pauses)
    expect(sliced.rules.map((rule) => rule.id)).toEqual(atOnce.rules.map((rule) => rule.id))
    expect(sliced.problems).toEqual(atOnce.problems)
    expect(atOnce.problems.map((problem) => problem.path.join('.'))).toEqual(
      expect.arrayContaining(['routes.2000.path', 'routes.2001.path', 'routes.2002.upstream']))
    expect(sliced.rules).toHaveLength(2_002)
  })

  it('pauses at the first place past its time budget, not at every one', async () => {
    const busy = (ms: number) => { const until = performance.now() + ms; while (performance.now() < until) { /* work */ } }
    function* steps(each: number) { for (let i = 0; i < 10; i++) { busy(each); yield } return 'done' }
    let pauses = 0
    const pause = async () => { pauses++ }
    // Each step outlasts a 2 ms budget: a pause after every one.
    expect(await runInSlices(steps(3), pause, 2)).toBe('done')
    expect(pauses).toBe(10)
    // Ten short steps fit in one budget: no pause at all.
    pauses = 0
    expect(await runInSlices(steps(0.01), pause, 10_000)).toBe('done')
    expect(pauses).toBe(0)
  })

  it('runs at once without any pause (start-up and `portcullis check`)', () => {
    let ran = 0
    function* steps() { for (let i = 0; i < 5; i++) { ran++; yield } return 'done' }
    expect(runAtOnce(steps())).toBe('done')
    expect(ran).toBe(5)
  })
})
