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

  it('counter: repeats, alternations and a label set differing only in its last value each land in their own series; reset forgets the last one', async () => {
    const theirs = new Registry()
    const ours = new Registry()
    const reference = new Counter({ name: 'ref', help: 'c', labelNames: ['route', 'status'], registers: [theirs] })
    const plain = new PlainCounter('mine', 'c', ['route', 'status'], ours)
    const sequence = [['a', '200'], ['a', '200'], ['a', '201'], ['a', '200'], ['b', '200'], ['b', '200'], ['a', '200']] as const
    for (const [route, status] of sequence) {
      reference.inc({ route, status })
      // A label value made anew each time (as String(status) is): equal by content, not the same string object.
      plain.labels(route, String(Number(status))).value++
    }
    expect(await render(ours, 'mine')).toBe(await render(theirs, 'ref'))
    expect(await render(ours, 'mine')).toContain('m{route="a",status="200"} 4')
    // After a reset the last series is not reused: counting starts again at 1 in a series the exposition shows.
    plain.reset()
    plain.labels('a', '200').value++
    expect(await render(ours, 'mine')).toContain('m{route="a",status="200"} 1')
    expect(await render(ours, 'mine')).not.toContain('route="b"')
  })
})
