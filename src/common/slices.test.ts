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

  it('runs already in order are copied, not merged: a sorted table of 10,000 takes one comparison per item and one per pair of runs; displaced items and ties across runs still sort as Array.prototype.sort', () => {
    let compared = 0
    const counting = (a: Item, b: Item) => { compared++; return byKey(a, b) }
    const sorted = [...items(10_000, 1_000, 5)].sort(byKey)
    const input = [...sorted]
    runAtOnce(sortSteps(input, counting))
    expect(input.map((item) => item.at)).toEqual(sorted.map((item) => item.at))
    // 20 runs sorted by Array.prototype.sort (511 comparisons each on sorted input), then one comparison per pair of runs.
    expect(compared).toBeLessThan(10_000 + 40)
    // A few items moved: the merges still put them in place; keys repeat across run boundaries (ties keep their order).
    for (const moves of [1, 3, 50]) {
      const displaced = [...sorted]
      for (let m = 0; m < moves; m++) displaced.splice((m * 7919) % 10_000, 0, displaced.splice((m * 104_729) % 10_000, 1)[0]!)
      const expected = [...displaced].sort(byKey)
      runAtOnce(sortSteps(displaced, byKey))
      expect(displaced.map((item) => item.at), `${moves} moved`).toEqual(expected.map((item) => item.at))
    }
  })

  it('sorts a small array at once, without yielding', () => {
    const input = items(300, 10, 3)
    const steps = sortSteps(input, byKey)
    expect(steps.next().done).toBe(true)
    expect(input.map((item) => item.key)).toEqual([...input].map((item) => item.key).sort((a, b) => a - b))
  })
})
