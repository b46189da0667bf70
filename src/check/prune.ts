/**
 * One pass for `portcullis check`: a file with schema errors is also checked for what only the lint sees (an
 * unknown upstream, an overlapping route, …). The invalid parts are cut out of a copy — an unknown key, an
 * optional value of the wrong type — until the rest passes the schema, and the lint runs on that rest. Where a
 * cut would change what the rest means (a required key, an item of a list, whose removal renumbers the others),
 * nothing is cut and only the schema errors are reported, as before.
 */
import type { ErrorObject } from 'ajv'

type Path = ReadonlyArray<string | number>

/** `/routes/2/scopes` → `['routes', 2, 'scopes']` */
export function instancePathOf(error: ErrorObject): Array<string | number> {
  return error.instancePath.split('/').slice(1)
    .map((part) => part.replace(/~1/g, '/').replace(/~0/g, '~'))
    .map((part) => (/^[0-9]+$/.test(part) ? Number(part) : part))
}

/** What to cut for one error: the unknown key, or the value that is wrong; undefined when it cannot be cut. */
function cutOf(error: ErrorObject): Path | undefined {
  if (error.keyword === 'required') return undefined
  const at = instancePathOf(error)
  const path = error.keyword === 'additionalProperties' ? [...at, (error.params as { additionalProperty: string }).additionalProperty] : at
  const last = path.at(-1)
  return typeof last === 'string' ? path : undefined
}

function remove(root: unknown, path: Path): void {
  let node = root
  for (const part of path.slice(0, -1)) {
    if (node === null || typeof node !== 'object') return
    node = (node as Record<string | number, unknown>)[part]
  }
  if (node !== null && typeof node === 'object' && !Array.isArray(node)) delete (node as Record<string, unknown>)[path.at(-1) as string]
}

/**
 * A copy of `value` with the invalid parts cut, valid by `validate`, and the paths cut; undefined when an error
 * cannot be cut, or three rounds of cutting do not make it valid.
 */
export function pruneInvalid(value: unknown, errors: readonly ErrorObject[], validate: (value: unknown) => ErrorObject[] | null)
  : { value: unknown; cut: Path[] } | undefined {
  const copy = structuredClone(value)
  const cut: Path[] = []
  let pending: readonly ErrorObject[] | null = errors
  for (let round = 0; round < 3 && pending !== null && pending.length > 0; round++) {
    const paths = pending.map(cutOf)
    if (paths.some((path) => path === undefined)) return undefined
    for (const path of paths as Path[]) {
      remove(copy, path)
      cut.push(path)
    }
    pending = validate(copy)
  }
  return pending === null || pending.length === 0 ? { value: copy, cut } : undefined
}

const within = (inner: Path, outer: Path) => outer.length <= inner.length && outer.every((part, i) => part === inner[i])

/**
 * Whether a lint problem at `path` may echo a cut: at or under a cut part, or at one of the objects a part was
 * cut from (a rule whose only, misspelt key was cut is empty to the lint).
 */
export function underCut(path: Path, cut: readonly Path[]): boolean {
  return cut.some((at) => within(path, at) || within(at, path))
}
