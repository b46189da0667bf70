/** An OTLP/HTTP (JSON) traces receiver on 127.0.0.1: what the gateway exports, decoded into spans. */
import http from 'node:http'
import type { AddressInfo } from 'node:net'

export interface ExportedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  status: { code?: number }
}

/** OTLP/JSON ids are hex (the spec); some exporters send base64: both read as hex. */
function hex(id: unknown): string {
  if (typeof id !== 'string' || id === '') return ''
  return /^[0-9a-f]+$/.test(id) ? id : Buffer.from(id, 'base64').toString('hex')
}

function attributesOf(list: Array<{ key: string; value: Record<string, unknown> }> | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const { key, value } of list ?? []) out[key] = value.stringValue ?? (value.intValue !== undefined ? Number(value.intValue) : undefined) ?? value.boolValue ?? value.doubleValue
  return out
}

export interface Collector {
  /** The OTLP/HTTP traces endpoint, for `tracing.endpoint`. */
  url: string
  spans: ExportedSpan[]
  /** Every export as it came, to search for what must never be in one. */
  bodies: string[]
  close(): Promise<void>
}

export async function startCollector(): Promise<Collector> {
  const spans: ExportedSpan[] = []
  const bodies: string[] = []
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (chunk: Buffer) => chunks.push(chunk))
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8')
      bodies.push(text)
      const payload = JSON.parse(text) as { resourceSpans: Array<{ scopeSpans: Array<{ spans: Array<Record<string, unknown>> }> }> }
      for (const resource of payload.resourceSpans) {
        for (const scope of resource.scopeSpans) {
          for (const span of scope.spans) {
            spans.push({
              traceId: hex(span.traceId), spanId: hex(span.spanId), parentSpanId: hex(span.parentSpanId), name: span.name as string,
              kind: span.kind as number, attributes: attributesOf(span.attributes as never), status: (span.status ?? {}) as { code?: number },
            })
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end('{}')
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/traces`, spans, bodies,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  }
}
