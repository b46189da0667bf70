/**
 * A bounded map whose hits do no bookkeeping but one flag (SIEVE, a CLOCK): a hit marks its entry `visited`; to make
 * room, a hand walks from the oldest entry towards the newest, clears the mark of each visited entry it passes and
 * drops the first one not visited, and stays there for the next time. An entry in use is kept as under
 * least-recently-used eviction, and the map holds up to `max` entries exactly. lru-cache keeps a
 * recency list that every hit rewrites: at a million entries that is several more cache misses per hit than the
 * lookup itself (docs/performance.md, "How the cost grows: tokens"). The cost moves to the misses that evict, and
 * is bounded there: each entry is passed over at most once per visit.
 */
export interface Visited {
  visited: boolean
}

export class SecondChance<V extends Visited> {
  private readonly map = new Map<string, V>()
  /** Entries dropped to make room, in all. */
  evicted = 0
  /**
   * Where the last eviction stopped: one live iterator, so a pass never starts over the entries it has passed (a new
   * iterator would walk the deleted slots a Map keeps at its front until it compacts).
   */
  private hand: Iterator<[string, V]> | undefined

  constructor(private readonly max: number) {}

  get size(): number {
    return this.map.size
  }

  get(key: string): V | undefined {
    const value = this.map.get(key)
    if (value !== undefined) value.visited = true
    return value
  }

  set(key: string, value: V): void {
    if (!this.map.has(key)) this.makeRoom()
    this.map.set(key, value)
  }

  delete(key: string): boolean {
    return this.map.delete(key)
  }

  entries(): IterableIterator<[string, V]> {
    return this.map.entries()
  }

  keys(): string[] {
    return [...this.map.keys()]
  }

  private makeRoom(): void {
    const map = this.map
    while (map.size >= this.max) {
      // The hand goes from the oldest entry to the newest (a Map iterates in insertion order), then starts over.
      let step = this.hand?.next()
      if (step === undefined || step.done === true) {
        this.hand = map.entries()
        step = this.hand.next()
      }
      const [key, value] = step.value as [string, V]
      if (value.visited) {
        value.visited = false
      } else {
        map.delete(key)
        this.evicted++
      }
    }
  }
}
