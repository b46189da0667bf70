import { Counter, Histogram, Registry } from 'prom-client'
import { describe, expect, it } from 'vitest'
import { PlainCounter, PlainHistogram } from './plain.js'

/** The exposition of one registry's metrics, with `name` put where the metric's own name was. */
async function render(registry: Registry, name: string): Promise<string> {
  return (await registry.metrics()).replaceAll(name, 'm')
}

describe('plain metrics render exactly as prom-client\'s own', () => {
  it('histogram: the same observations give the same buckets, +Inf, sum and count, per label set', async () => {
    const buckets = [0.001, 0.01, 0.1, 1]
    const theirs = new Registry()
    const ours = new Registry()
    const reference = new Histogram({ name: 'ref', help: 'h', labelNames: ['route'], buckets, registers: [theirs] })
    const plain = new PlainHistogram('mine', 'h', ['route'], buckets, ours)
    const observations: Array<[string, number]> = [['a', 0.0005], ['a', 0.001], ['a', 0.05], ['b', 3], ['a', 0.5], ['b', 0.01]]
    for (const [route, value] of observations) {
      reference.observe({ route }, value)
      plain.observe(value, route)
    }
    expect(await render(ours, 'mine')).toBe(await render(theirs, 'ref'))
  })

  it('counter: the same increments give the same lines; a label set is one series however often it is asked for', async () => {
    const theirs = new Registry()
    const ours = new Registry()
    const reference = new Counter({ name: 'ref', help: 'c', labelNames: ['route', 'status'], registers: [theirs] })
    const plain = new PlainCounter('mine', 'c', ['route', 'status'], ours)
    for (const [route, status] of [['a', '200'], ['a', '200'], ['b', '401'], ['a', '404']] as const) {
      reference.inc({ route, status })
      plain.labels(route, status).value++
    }
    expect(await render(ours, 'mine')).toBe(await render(theirs, 'ref'))
  })
})
