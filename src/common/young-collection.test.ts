import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks'
import { describe, expect, it, onTestFinished } from 'vitest'
import { collectAll, collectYoung, collectYoungPast } from './young-collection.js'

type Collection = PerformanceEntry & { detail: { kind: number; flags: number } }

/** The collections V8 reports while `run` runs (and the observer's next delivery). */
async function entriesDuring(run: () => void): Promise<Collection[]> {
  const seen: PerformanceEntry[] = []
  const observer = new PerformanceObserver((list) => { seen.push(...list.getEntries()) })
  observer.observe({ entryTypes: ['gc'] })
  onTestFinished(() => observer.disconnect())
  run()
  await new Promise((resolve) => setTimeout(resolve, 50))
  return seen as Collection[]
}

/** The kinds of the collections V8 reports while `run` runs. */
async function collectionsDuring(run: () => void): Promise<number[]> {
  return (await entriesDuring(run)).map((entry) => entry.detail.kind)
}

describe('collectYoung', () => {
  it('runs a young-generation collection (a scavenge) when asked', async () => {
    // Nothing allocated meanwhile: a scavenge seen is the one asked for.
    const kinds = await collectionsDuring(() => { collectYoung() })
    expect(kinds).toContain(constants.NODE_PERFORMANCE_GC_MINOR)
  })

  it('leaves the program without a global gc', () => {
    collectYoung()
    expect((globalThis as { gc?: unknown }).gc).toBeUndefined()
  })
})

describe('collectYoungPast', () => {
  /** How many young-generation collections the process asked for (V8's own, when the young generation fills, not counted). */
  async function askedDuring(run: () => void): Promise<number> {
    return (await entriesDuring(run)).filter(({ detail }) => detail.kind === constants.NODE_PERFORMANCE_GC_MINOR
      && (detail.flags & constants.NODE_PERFORMANCE_GC_FLAGS_FORCED) !== 0).length
  }

  it('collects once the young generation grew by the bytes given since the last collection, not before', async () => {
    collectYoungPast(0)
    const kept: unknown[] = []
    // A few kilobytes against 256 KB: nothing to collect.
    expect(await askedDuring(() => {
      for (let i = 0; i < 100; i++) kept.push({ i })
      collectYoungPast(256 * 1024)
    })).toBe(0)
    // About 600 KB of objects against 256 KB: collected.
    expect(await askedDuring(() => {
      for (let i = 0; i < 8_000; i++) kept.push({ i, text: `item ${i}` })
      collectYoungPast(256 * 1024)
    })).toBe(1)
    expect(kept.length).toBe(8_100)
  })
})

describe('collectAll', () => {
  it('runs a full collection (mark-sweep-compact) when asked', async () => {
    const kinds = await collectionsDuring(() => { collectAll() })
    expect(kinds).toContain(constants.NODE_PERFORMANCE_GC_MAJOR)
  })
})
