/**
 * How many of something each key has going at once (request bodies streaming, metadata documents being fetched,
 * per client address), with a bound: a place is taken, and given back exactly once.
 */
export class InFlightByKey {
  private readonly counts = new Map<string, number>()

  count(key: string): number {
    return this.counts.get(key) ?? 0
  }

  /** One more for `key`, unless it has `limit` going already (then undefined); returns the release, safe to call twice. */
  take(key: string, limit: number): (() => void) | undefined {
    const now = this.count(key)
    if (now >= limit) return undefined
    this.counts.set(key, now + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      const left = this.count(key) - 1
      if (left <= 0) this.counts.delete(key)
      else this.counts.set(key, left)
    }
  }
}
