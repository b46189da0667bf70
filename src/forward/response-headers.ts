/** The upstream's response headers as relayed to the client: hop-by-hop fields (RFC 9110 §7.6.1) removed. */
import { connectionListed } from '../common/header-names.js'
import { FieldStrings } from './field-strings.js'

const FIELD = new FieldStrings()

const RESPONSE_HOP_BY_HOP = new Set(['connection', 'keep-alive', 'proxy-connection', 'transfer-encoding', 'te', 'trailer', 'upgrade',
  'proxy-authenticate', 'proxy-authorization'])

/**
 * Upstream response headers, as undici hands them over (name, value, name, value, … in Buffers), minus
 * hop-by-hop ones, as the flat list `writeHead` takes: names lower-cased, repeated fields kept apart.
 * Node sets its own framing.
 */
export function responseHeaderList(raw: readonly Buffer[]): string[] {
  const out: string[] = []
  let connection: string | undefined
  const field = FIELD
  for (let i = 0; i < raw.length; i += 2) {
    field.read(raw[i]!, raw[i + 1]!)
    const lower = field.name
    const value = field.value
    if (lower === 'connection') connection = connection === undefined ? value : `${connection},${value}`
    if (!RESPONSE_HOP_BY_HOP.has(lower)) out.push(lower, value)
  }
  const alsoRemoved = connectionListed(connection)
  if (!alsoRemoved) return out
  const kept: string[] = []
  for (let i = 0; i < out.length; i += 2) if (!alsoRemoved.has(out[i]!)) kept.push(out[i]!, out[i + 1]!)
  return kept
}
