/** "Did you mean …?" for a misspelt key or name: the closest of the known ones, when it is close enough. */

/** Levenshtein distance, with a transposition of two neighbours counted as one edit (Damerau, optimal string alignment). */
function distance(a: string, b: string): number {
  const rows = Array.from({ length: a.length + 1 }, (_, i) => [i, ...Array<number>(b.length).fill(0)])
  for (let j = 1; j <= b.length; j++) rows[0]![j] = j
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1
      let best = Math.min(rows[i - 1]![j]! + 1, rows[i]![j - 1]! + 1, rows[i - 1]![j - 1]! + cost)
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) best = Math.min(best, rows[i - 2]![j - 2]! + 1)
      rows[i]![j] = best
    }
  }
  return rows[a.length]![b.length]!
}

/**
 * The known name closest to `name` (compared without case), if it is within a third of its length in edits
 * (at least one, at most three); undefined otherwise, or when two are equally close.
 */
export function closest(name: string, known: Iterable<string>): string | undefined {
  const wanted = name.toLowerCase()
  const limit = Math.min(3, Math.max(1, Math.floor(wanted.length / 3)))
  let best: string | undefined
  let bestDistance = Infinity
  let tie = false
  for (const candidate of known) {
    const d = distance(wanted, candidate.toLowerCase())
    if (d < bestDistance) { best = candidate; bestDistance = d; tie = false } else if (d === bestDistance && candidate !== best) tie = true
  }
  return best !== undefined && bestDistance <= limit && bestDistance > 0 && !tie ? best : undefined
}

/** ` (did you mean "x"?)`, or '' when no known name is close. */
export function didYouMean(name: string, known: Iterable<string>): string {
  const match = closest(name, known)
  return match === undefined ? '' : ` (did you mean "${match}"?)`
}
