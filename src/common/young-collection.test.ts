import { constants, PerformanceObserver, type PerformanceEntry } from 'node:perf_hooks'
import { describe, expect, it, onTestFinished } from 'vitest'
import { collectAll, collectYoung } from './young-collection.js'

/** The kinds of the collections V8 reports while `run` runs (and the observer's next delivery). */
async function collectionsDuring(run: () => void): Promise<number[]> {
  const seen: PerformanceEntry[] = []
  const observer = new PerformanceObserver((list) => { seen.push(...list.getEntries()) })
  observer.observe({ entryTypes: ['gc'] })
  onTestFinished(() => observer.disconnect())
  run()
  await new Promise((resolve) => setTimeout(resolve, 50))
  return seen.map((entry) => ((entry as PerformanceEntry & { detail?: { kind: number } }).detail?.kind ?? -1))
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

describe('collectAll', () => {
  it('runs a full collection (mark-sweep-compact) when asked', async () => {
    const kinds = await collectionsDuring(() => { collectAll() })
    expect(kinds).toContain(constants.NODE_PERFORMANCE_GC_MAJOR)
  })
})
