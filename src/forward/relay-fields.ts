/** The fields of an upstream's answer on their way to the client: the gateway's added, the trailers relayed. */
import type { ServerResponse } from 'node:http'

/** `[name, value, …]` set on `res` to be sent with its first write (or its end). */
export function setHeaders(res: ServerResponse, statusCode: number, list: readonly string[]): void {
  res.statusCode = statusCode
  const fields: Record<string, string | string[]> = {}
  for (let i = 0; i < list.length; i += 2) {
    const name = list[i]!
    const prior = fields[name]
    fields[name] = prior === undefined ? list[i + 1]! : [...(Array.isArray(prior) ? prior : [prior]), list[i + 1]!]
  }
  for (const name in fields) res.setHeader(name, fields[name]!)
}

/** The upstream's trailer fields (raw `[name, value, …]` over HTTP/1.1, an object over HTTP/2) on `res`. */
export function relayTrailers(res: ServerResponse, trailers: Record<string, string | string[]> | string[] | Buffer[]): Record<string, string | string[]> {
  const fields: Record<string, string | string[]> = {}
  let any = false
  if (Array.isArray(trailers)) {
    for (let i = 0; i + 1 < trailers.length; i += 2) {
      fields[trailers[i]!.toString().toLowerCase()] = trailers[i + 1]!.toString()
      any = true
    }
  } else {
    for (const name in trailers) {
      if (name.charCodeAt(0) === 58) continue
      fields[name] = trailers[name]!
      any = true
    }
  }
  if (any) res.addTrailers(fields)
  return fields
}

/** `list` (lower-case names) without the names `extra` sets, then `extra`'s. */
export function withHeaders(list: readonly string[], extra: readonly string[]): string[] {
  const out: string[] = []
  for (let i = 0; i < list.length; i += 2) {
    if (extra.includes(list[i]!)) continue
    out.push(list[i]!, list[i + 1]!)
  }
  for (const value of extra) out.push(value)
  return out
}
