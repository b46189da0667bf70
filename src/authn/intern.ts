/**
 * One copy of what many cached principals repeat: a client id, a scope list. A cache of a million tokens from a
 * few clients otherwise holds a million copies of the same strings and arrays (bench/token-scale.mjs). Only values
 * of verified tokens come here (their issuer signed them); the table is bounded, and emptied when full.
 */
const MAX_INTERNED = 4096

export class Interner {
  private readonly strings = new Map<string, string>()
  private readonly lists = new Map<string, readonly string[]>()

  string<T extends string | undefined>(value: T): T {
    if (value === undefined) return value
    const found = this.strings.get(value)
    if (found !== undefined) return found as T
    if (this.strings.size >= MAX_INTERNED) this.strings.clear()
    this.strings.set(value, value)
    return value
  }

  /** The shared, frozen copy of `values` (the same members in the same order). */
  list(values: readonly string[]): readonly string[] {
    const key = values.join(' ')
    const found = this.lists.get(key)
    if (found !== undefined) return found
    if (this.lists.size >= MAX_INTERNED) this.lists.clear()
    const shared = Object.freeze(values.map((value) => this.string(value)))
    this.lists.set(key, shared)
    return shared
  }
}
