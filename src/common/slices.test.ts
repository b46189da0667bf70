import { describe, expect, it } from 'vitest'
import { runAtOnce, sortSteps } from './slices.js'

interface Item { readonly key: number; readonly at: number }

/** A deterministic generator, so a failure names its case. */
function items(count: number, keys: number, seed: number): Item[] {
  let state = seed
  const next = () => (state = (state * 1103515245 + 12345) % 2147483648)
  return Array.from({ length: count }, (_, at) => ({ key: next() % keys, at }))
}

const byKey = (a: Item, b: Item) => a.key - b.key

describe('sortSteps', () => {
  it('sorts as Array.prototype.sort does, ties in their order (stable), at sizes around its runs and merges', () => {
    for (const count of [0, 1, 2, 511, 512, 513, 1023, 1024, 1025, 1536, 3000, 5001, 10_000]) {
      for (const keys of [1, 7, 1000, 1_000_000]) {
        const input = items(count, keys, count * 31 + keys)
        const expected = [...input].sort(byKey)
        const sorted = [...input]
        runAtOnce(sortSteps(sorted, byKey))
        expect(sorted.map((item) => item.at), `${count} items, ${keys} keys`).toEqual(expected.map((item) => item.at))
      }
    }
  })

  it('yields between runs and within merges, not only at the end: about one yield per 512 items per pass', () => {
    const count = 10_000
    const steps = sortSteps(items(count, 1_000_000, 7), byKey)
    let yields = 0
    while (steps.next().done !== true) yields++
    // 20 runs of 512, then 5 merge passes of up to 10,000 items each (a yield every 512 items compared).
    expect(yields).toBeGreaterThanOrEqual(20 + 5 * 10)
    expect(yields).toBeLessThanOrEqual(20 + 5 * 20)
  })

  it('sorts a small array at once, without yielding', () => {
    const input = items(300, 10, 3)
    const steps = sortSteps(input, byKey)
    expect(steps.next().done).toBe(true)
    expect(input.map((item) => item.key)).toEqual([...input].map((item) => item.key).sort((a, b) => a - b))
  })
})
