/**
 * One pass for `portcullis check`: a file with schema errors is also checked for what only the lint sees (an
 * unknown upstream, an overlapping route, …). The invalid parts are cut out of a copy until the rest passes the
 * schema, and the lint runs on that rest:
 * - an unknown key, or a wrong value: that key (or list item);
 * - an object missing a required key (a required key just cut among them): the object, from its parent; so, round
 *   by round, the cut grows up to a part that may be absent — at most a whole item of a list. The items after a
 *   cut item move up in the copy; the lint's problems are told by their places in the file (`routes[4]`, not the
 *   copy's `routes[3]`), in their paths and in their messages.
 * The lint's problems that may echo a cut are not reported: under or around a cut part, or naming what was cut
 * (a route that sends to a cut upstream would otherwise read `unknown upstream "x"`). Only a root that misses a
 * required key cannot be cut: then the schema's errors alone are reported.
 */
import type { ErrorObject } from 'ajv'

export type Path = ReadonlyArray<string | number>

/** `/routes/2/scopes` → `['routes', 2, 'scopes']` */
export function instancePathOf(error: ErrorObject): Array<string | number> {
  return error.instancePath.split('/').slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((part) => (/^[0-9]+$/.test(part) ? Number(part) : part))
}

/** What one error cuts, in the copy as it is now: the unknown key, the wrong value, or the object missing a key. */
function targetOf(error: ErrorObject): Path {
  const at = instancePathOf(error)
  return error.keyword === 'additionalProperties' ? [...at, (error.params as { additionalProperty: string }).additionalProperty] : at
}

type Node = Record<string | number, unknown>
const isNode = (value: unknown): value is Node => value !== null && typeof value === 'object'

/** Fields whose value names a list item, which other parts of a config refer to (`routes[].id`, …). */
const NAMING_FIELDS = ['id', 'name', 'client_id', 'username', 'issuer', 'resource'] as const

/** A copy being cut, which remembers where each of its list items stood in the file. */
class Cutting {
  /** Per list of the copy: the index in the file of each item still in it. */
  private readonly places = new WeakMap<unknown[], number[]>()
  /** The cut parts, as paths in the file. */
  readonly cut: Path[] = []
  /** The names the cut parts carried: a problem that quotes one echoes the cut. */
  readonly names = new Set<string>()
  /** Per list name (`routes`, `clients`): its items' places in the file, for the messages that cite them. */
  readonly lists = new Map<string, number[]>()

  constructor(readonly root: unknown) {}

  private placesOf(list: unknown[]): number[] {
    let places = this.places.get(list)
    if (places === undefined) {
      places = list.map((_, i) => i)
      this.places.set(list, places)
    }
    return places
  }

  /** `path` in the copy as it stands in the file. */
  inFile(path: Path): Path {
    const out: Array<string | number> = []
    let node: unknown = this.root
    for (const part of path) {
      out.push(typeof part === 'number' && Array.isArray(node) ? (this.places.get(node)?.[part] ?? part) : part)
      node = isNode(node) ? node[part] : undefined
    }
    return out
  }

  /** Cuts the parts the errors name; false when one cannot be cut. */
  cutFor(errors: readonly ErrorObject[]): boolean {
    const removals: Array<{ parent: Node; key: string | number }> = []
    for (const error of errors) {
      // An object missing a required key goes whole, from its parent; anything else alone (and a required key's
      // object next round).
      const at = error.keyword === 'required' ? instancePathOf(error) : targetOf(error)
      if (at.length === 0) return false
      let parent: unknown = this.root
      for (const part of at.slice(0, -1)) parent = isNode(parent) ? parent[part] : undefined
      const key = at.at(-1)!
      if (!isNode(parent) || !(key in parent)) continue
      if (removals.some((removal) => removal.parent === parent && removal.key === key)) continue
      removals.push({ parent, key })
      this.cut.push(this.inFile(at))
      this.remember(key, parent[key])
    }
    // Highest index first: each splice leaves the lower ones where they were.
    removals.sort((a, b) => (typeof b.key === 'number' ? b.key : -1) - (typeof a.key === 'number' ? a.key : -1))
    for (const { parent, key } of removals) {
      if (Array.isArray(parent) && typeof key === 'number') {
        this.placesOf(parent).splice(key, 1)
        parent.splice(key, 1)
      } else {
        delete parent[key]
      }
    }
    return true
  }

  /** The names a cut object carried: its key in a map (`upstreams.main`), and its naming fields. */
  private remember(key: string | number, value: unknown): void {
    if (!isNode(value)) return
    if (typeof key === 'string') this.names.add(key)
    for (const field of NAMING_FIELDS) if (typeof value[field] === 'string') this.names.add(value[field] as string)
  }

  /** Each list of the copy with cut items, by its key, for renumbering the messages that cite its items. */
  collectLists(node: unknown = this.root, key = ''): void {
    if (Array.isArray(node)) {
      const places = this.places.get(node)
      if (places !== undefined && key !== '') this.lists.set(key, places)
      for (const item of node) this.collectLists(item)
    } else if (isNode(node)) {
      for (const [name, value] of Object.entries(node)) this.collectLists(value, name)
    }
  }
}

/** The result of cutting: the valid rest, and how to read the lint's problems on it against the file. */
export interface Pruned {
  readonly value: unknown
  /** A problem at `path` of the rest: its path in the file and its message with the file's indexes, or undefined for an echo of a cut. */
  place(path: Path, message: string): { path: Path; message: string } | undefined
}

/**
 * A copy of `value` with the invalid parts cut, valid by `validate`; undefined when an error cannot be cut, or
 * eight rounds of cutting (one level up each) do not make it valid.
 */
export function pruneInvalid(value: unknown, errors: readonly ErrorObject[], validate: (value: unknown) => ErrorObject[] | null): Pruned | undefined {
  const cutting = new Cutting(structuredClone(value))
  let pending: readonly ErrorObject[] | null = errors
  for (let round = 0; round < 8 && pending !== null && pending.length > 0; round++) {
    if (!cutting.cutFor(pending)) return undefined
    pending = validate(cutting.root)
  }
  if (pending !== null && pending.length > 0) return undefined
  cutting.collectLists()
  return {
    value: cutting.root,
    place(path, message) {
      const inFile = cutting.inFile(path)
      if (underCut(inFile, cutting.cut) || [...cutting.names].some((name) => message.includes(`"${name}"`))) return undefined
      return { path: inFile, message: renumber(message, cutting.lists) }
    },
  }
}

/** `routes[3]` in a message about the rest → `routes[4]`, the item's place in the file. */
function renumber(message: string, lists: ReadonlyMap<string, number[]>): string {
  if (lists.size === 0) return message
  return message.replace(/\b([a-z_]+)\[(\d+)\]/g, (whole, name: string, index: string) => {
    const place = lists.get(name)?.[Number(index)]
    return place === undefined ? whole : `${name}[${place}]`
  })
}

const within = (inner: Path, outer: Path) => outer.length <= inner.length && outer.every((part, i) => part === inner[i])

/**
 * Whether a lint problem at `path` may echo a cut: at or under a cut part, or at one of the objects a part was
 * cut from (a rule whose only, misspelt key was cut is empty to the lint).
 */
function underCut(path: Path, cut: readonly Path[]): boolean {
  return cut.some((at) => within(path, at) || within(at, path))
}
