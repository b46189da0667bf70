/**
 * MCP method and tool names: the methods clients send over Streamable HTTP in revisions
 * 2025-03-26 to 2026-07-28, which of them name a target, and the folded form that catches look-alike
 * spellings an upstream might match loosely.
 */

/** Client-to-server methods of MCP 2025-03-26, 2025-06-18, 2025-11-25 and 2026-07-28 (requests and notifications). */
export const KNOWN_METHODS: ReadonlySet<string> = new Set([
  'initialize', 'ping', 'server/discover', 'subscriptions/listen',
  'tools/list', 'tools/call',
  'prompts/list', 'prompts/get',
  'resources/list', 'resources/templates/list', 'resources/read', 'resources/subscribe', 'resources/unsubscribe',
  'completion/complete', 'logging/setLevel',
  'tasks/get', 'tasks/result', 'tasks/list', 'tasks/cancel', 'tasks/update',
  'notifications/initialized', 'notifications/cancelled', 'notifications/progress',
  'notifications/roots/list_changed', 'notifications/tasks/status',
])

/**
 * The methods whose target `Mcp-Name` mirrors and which MCP 2026-07-28 requires it for ("Standard Request
 * Headers"), and the params member that names it.
 */
export const NAMED_BY: ReadonlyMap<string, 'name' | 'uri'> = new Map([
  ['tools/call', 'name'], ['prompts/get', 'name'], ['resources/read', 'uri'],
])
export const NAMED_METHODS: ReadonlySet<string> = new Set(NAMED_BY.keys())

// Whitespace, controls and invisible format characters (zero-width space and joiners, bidi controls, soft hyphen).
const INVISIBLE = /[\p{Cc}\p{Cf}\p{Z}\s]/gu

/**
 * A name as a loose matcher might see it: Unicode compatibility form (NFKC: fullwidth `ｄｅｌｅｔｅ` is
 * `delete`, the Kelvin sign is `K`), lower case, invisible characters removed. Never what is compared for a
 * match (that is exact); what tells a look-alike of a configured name from an unrelated one.
 */
export function foldName(name: string): string {
  return name.normalize('NFKC').toLowerCase().replace(INVISIBLE, '')
}

/** A known method by its folded form ({@link foldName}): `TOOLS/CALL` → `tools/call`. */
export const KNOWN_BY_FOLD: ReadonlyMap<string, string> = new Map([...KNOWN_METHODS].map((method) => [foldName(method), method]))
