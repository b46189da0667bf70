/** `builtin:echo`: answers with what it received (after the gateway's header work) as JSON. */
import type { ServerResponse } from 'node:http'
import type { HeaderList } from './upstream-headers.js'
import type { Relay } from './proxy.js'

const MAX_ECHOED_BODY = 64 * 1024

/** Name and value pairs as an object: `a=1&a=2&b=3` → `{ a: ['1', '2'], b: '3' }`, a repeated name keeping every value. */
function grouped(pairs: Iterable<readonly [string, string]>): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {}
  for (const [name, value] of pairs) {
    const prior = out[name]
    out[name] = prior === undefined ? value : [...(Array.isArray(prior) ? prior : [prior]), value]
  }
  return out
}

/** The `[name, value]` pairs of a header list. */
function* fieldsOf(list: HeaderList): Generator<readonly [string, string]> {
  for (let i = 0; i < list.length; i += 2) yield [list[i]!, list[i + 1]!]
}

/** `cors`: the CORS headers of the request's origin, when the gateway answers CORS on its route. */
export async function echoRequest(res: ServerResponse, relay: Relay & { readonly path: string; readonly query: string }): Promise<void> {
  const { req, path, query, headers, body, cors } = relay
  const extra = relay.rateLimitFields ?? null
  let bodyBytes = 0
  const kept: Buffer[] = []
  if (Buffer.isBuffer(body)) {
    bodyBytes = body.length
    kept.push(body.subarray(0, MAX_ECHOED_BODY))
  } else if (body) {
    for await (const chunk of body) {
      const buffer = chunk as Buffer
      if (bodyBytes < MAX_ECHOED_BODY) kept.push(buffer.subarray(0, MAX_ECHOED_BODY - bodyBytes))
      bodyBytes += buffer.length
    }
  }
  const payload = JSON.stringify({
    method: req.method,
    path,
    query: grouped(new URLSearchParams(query)),
    headers: grouped(fieldsOf(headers)),
    body: Buffer.concat(kept).toString('utf8'),
    body_bytes: bodyBytes,
    body_truncated: bodyBytes > MAX_ECHOED_BODY,
  })
  res.writeHead(200, {
    'content-type': 'application/json; charset=utf-8',
    'content-length': Buffer.byteLength(payload),
    'cache-control': 'no-store',
    ...cors?.headers,
    ...(extra !== null && Object.fromEntries(Array.from({ length: extra.length / 2 }, (_, i) => [extra[2 * i]!, extra[2 * i + 1]!]))),
  })
  res.end(payload)
}
