/**
 * The route table's index: the same answer as trying every rule in order, most specific first (compile.ts), in
 * time that does not grow with the number of routes. Each rule is filed under its literal prefix (its segments
 * up to the first `*`, `{name}` or `**`) in a tree keyed by segment. A rule can match a path only if the path
 * starts with that prefix (a literal matches only its own canonical spelling, and nothing before the prefix
 * can shift it), so the candidates for a path are the rules filed along the path's own walk down the tree: a
 * handful of short lists, tried in the table's order. Small tables are scanned as before (as fast, and simpler).
 */
import { runAtOnce, type Steps } from '../common/slices.js'
import type { CompiledRule } from './compile.js'
import { matchSegments } from './segments.js'

/** Up to this many rules a scan of all of them costs no more than the walk. */
const SCAN_UP_TO = 32
/** Rules filed between two places a hot reload's build may pause (common/slices.ts). */
const FILED_PER_STEP = 500

interface Node {
  /** {@link NO_CHILDREN} until a child is filed: most nodes are leaves. */
  children: ReadonlyMap<string, Node>
  /** Positions in the table (ascending: most specific first) of the rules whose literal prefix ends here; {@link NO_RULES} until one is. */
  rules: readonly number[]
}

// One empty map and list for every node without children or rules: an index of 10,000 routes has thousands of
// nodes, built beside the one in service on a reload (each object made then is copied twice by the young
// generation's collections). The lookup reads them as any other.
const NO_CHILDREN: ReadonlyMap<string, Node> = new Map()
// Not frozen: a frozen array has another elements kind, and the lookup would see two shapes where it sees one.
const NO_RULES: readonly number[] = []

const newNode = (): Node => ({ children: NO_CHILDREN, rules: NO_RULES })

function literalPrefixLength(segments: readonly string[]): number {
  let i = 0
  while (i < segments.length && segments[i] !== '*' && segments[i] !== '**') i++
  return i
}

/** Whether the rules at each position of `a` and `b` have the same literal prefix (what the tree files them under). */
function* samePrefixes(a: readonly CompiledRule[], b: readonly CompiledRule[]): Steps<boolean> {
  if (a.length !== b.length) return false
  for (let position = 0; position < a.length; position++) {
    if (position > 0 && position % FILED_PER_STEP === 0) yield
    const x = a[position]!.segments
    const y = b[position]!.segments
    if (x === y) continue
    const end = literalPrefixLength(x)
    if (literalPrefixLength(y) !== end) return false
    for (let i = 0; i < end; i++) if (x[i] !== y[i]) return false
  }
  return true
}

export class RouteIndex {
  /** The index of `rules`, in one go. */
  static of(rules: readonly CompiledRule[]): RouteIndex {
    return runAtOnce(RouteIndex.steps(rules))
  }

  /**
   * The index of a table, filed a part at a time (a hot reload builds it between requests: common/slices.ts). The
   * tree depends only on the literal prefix of the rule at each position: where `previous` (the index in service)
   * has the same at every position (a reload that changed what routes do, not where they match), its tree is taken
   * as it is. It is never changed once built.
   */
  static* steps(rules: readonly CompiledRule[], previous?: RouteIndex): Steps<RouteIndex> {
    if (rules.length <= SCAN_UP_TO) return new RouteIndex(rules, null)
    if (previous?.root && (yield* samePrefixes(rules, previous.rules))) return new RouteIndex(rules, previous.root)
    const root = newNode()
    for (let position = 0; position < rules.length; position++) {
      if (position > 0 && position % FILED_PER_STEP === 0) yield
      const rule = rules[position]!
      let node = root
      const end = literalPrefixLength(rule.segments)
      for (let i = 0; i < end; i++) {
        const segment = rule.segments[i]!
        let child = node.children.get(segment)
        if (!child) {
          const children = node.children === NO_CHILDREN ? (node.children = new Map<string, Node>()) : node.children as Map<string, Node>
          children.set(segment, child = newNode())
        }
        node = child
      }
      if (node.rules === NO_RULES) node.rules = [position]
      else (node.rules as number[]).push(position)
    }
    return new RouteIndex(rules, root)
  }

  /** @param rules the compiled table, most specific first; `root`: its tree ({@link RouteIndex.steps}), null to scan */
  private constructor(readonly rules: readonly CompiledRule[], private readonly root: Node | null) {}

  /** The candidate lists along the path's walk down the tree, root first. */
  private candidates(root: Node, segments: readonly string[]): Array<readonly number[]> {
    const lists: Array<readonly number[]> = []
    let node: Node | undefined = root
    for (let depth = 0; node !== undefined; depth++) {
      if (node.rules.length > 0) lists.push(node.rules)
      if (depth === segments.length) break
      node = node.children.get(segments[depth]!)
    }
    return lists
  }

  /** The most specific rule for this method and the path's segments, or undefined. */
  match(method: string, segments: readonly string[]): CompiledRule | undefined {
    const { rules, root } = this
    if (root === null) {
      for (let i = 0; i < rules.length; i++) {
        const rule = rules[i]!
        if ((rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments)) return rule
      }
      return undefined
    }
    const lists = this.candidates(root, segments)
    const cursors = new Array<number>(lists.length).fill(0)
    // Merge the lists by table position: the first rule that matches is the one the full scan would find.
    for (;;) {
      let best = -1
      let pick = -1
      for (let k = 0; k < lists.length; k++) {
        const position = lists[k]![cursors[k]!]
        if (position !== undefined && (best === -1 || position < best)) {
          best = position
          pick = k
        }
      }
      if (pick === -1) return undefined
      cursors[pick]!++
      const rule = rules[best]!
      if ((rule.methods === null || rule.methods.has(method)) && matchSegments(rule.segments, segments)) return rule
    }
  }

  /** Every rule whose pattern matches the path, whatever its methods (for a 405's `Allow`). */
  matchingAnyMethod(segments: readonly string[]): CompiledRule[] {
    const { rules, root } = this
    const all = root === null ? rules : this.candidates(root, segments).flat().map((position) => rules[position]!)
    return all.filter((rule) => matchSegments(rule.segments, segments))
  }
}
