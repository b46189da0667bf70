/**
 * The request header names the gateway itself adds (the forwarding and identity headers, the configured claim
 * headers, the trace context), entered once in undici's table of known header names.
 *
 * undici checks every header name of every request it is given: a name in its table of well-known names
 * (`headerNameLowerCasedRecord`, `Accept` … `X-XSS-Protection`, each spelling mapped to its lower-case form) is
 * taken as it is; any other is lower-cased, looked up again and matched against the token grammar. The names
 * the gateway adds are not in that table, and are the same on every request: about 70 ns a name, some 0.6 µs
 * a forwarded request. Entered in the table, they are looked up once instead. The value of every header is
 * still checked, whatever its name, as are all the other names.
 *
 * The table is undici's internal (lib/core/constants.js), not its API. What is entered cannot change what
 * undici does with any name: only a name already lower-case and a valid token (RFC 9110 §5.1) is entered, mapped
 * to itself, which is what undici would work out for it; such a name is none of those undici treats apart
 * (host, content-length, connection, …: they are in the table already, and never overwritten). When the
 * module is not there (another undici), nothing is entered and undici checks these names as it does any other.
 * Only names from the config (and our own constants) come here, never one from a request: the table grows by
 * the configured names, at most MAX_ENTERED over the process's life (reloads included).
 */
import { createRequire } from 'node:module'

/** RFC 9110 §5.6.2 token, lower case only. */
const LOWER_TOKEN = /^[!#$%&'*+.^_`|~0-9a-z-]+$/
const MAX_ENTERED = 1_000

let table: Record<string, string> | null | undefined
let entered = 0

function knownNames(): Record<string, string> | null {
  if (table !== undefined) return table
  try {
    const constants = createRequire(import.meta.url)('undici/lib/core/constants.js') as { headerNameLowerCasedRecord?: unknown }
    const record = constants.headerNameLowerCasedRecord
    // What the table must be for an entry to mean what it means in undici 7: a spelling's lower-case form.
    table = typeof record === 'object' && record !== null && (record as Record<string, unknown>).Accept === 'accept'
      ? record as Record<string, string>
      : null
  } catch {
    table = null
  }
  return table
}

/**
 * Enters `names` (lower-case tokens; anything else is skipped) in undici's table of known header names. Returns
 * how many of them are in the table afterwards (0 when the table is not there).
 */
export function enterKnownHeaderNames(names: Iterable<string>): number {
  const known = knownNames()
  if (known === null) return 0
  let present = 0
  for (const name of names) {
    if (known[name] === undefined) {
      if (!LOWER_TOKEN.test(name) || entered >= MAX_ENTERED) continue
      known[name] = name
      entered++
    }
    if (known[name] === name) present++
  }
  return present
}
