/**
 * OpenTelemetry traces (`tracing:`): off by default; on, an OTLP/HTTP exporter and a ratio sampler. Spans are
 * made by hand where the time goes (the gateway request, authentication with its cache outcome, the JWKS
 * fetch, the introspection call, the upstream request, the token endpoint's grants), never by blanket
 * HTTP auto-instrumentation, whose cost in Node is large (measured: docs/performance.md, Tracing).
 *
 * W3C `traceparent` / `tracestate` are taken from the client (a sampled parent is followed: ParentBased) or
 * started, and passed to the upstream as the upstream span's context, sampled or not, so the upstream's own
 * traces join. The parent of the spans a request causes deep in the authenticator (a JWKS fetch, an
 * introspection call) is carried in an AsyncLocalStorage entered only when tracing is on.
 *
 * Attributes follow OpenTelemetry's HTTP semantic conventions; no token, secret, query string or subject
 * goes into a span unless `tracing.attributes.subject` says so.
 */
import { AsyncLocalStorage } from 'node:async_hooks'
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http'
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Context, type Span, type TextMapGetter, type Tracer } from '@opentelemetry/api'
import { W3CTraceContextPropagator } from '@opentelemetry/core'
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http'
import { resourceFromAttributes } from '@opentelemetry/resources'
import { BasicTracerProvider, BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base'
import type { TracingConfig } from '../config/schema.js'
import { parseDuration } from '../config/units.js'

export { SpanKind, SpanStatusCode, type Span }

const getter: TextMapGetter<IncomingHttpHeaders> = {
  keys: (carrier) => Object.keys(carrier),
  get: (carrier, key) => carrier[key],
}

export class Tracing {
  private readonly provider: BasicTracerProvider
  readonly tracer: Tracer
  private readonly propagator = new W3CTraceContextPropagator()
  private readonly current = new AsyncLocalStorage<Context>()
  /** Whether spans may carry the token's subject (`tracing.attributes.subject`). */
  readonly withSubject: boolean

  constructor(config: TracingConfig) {
    this.withSubject = config.attributes?.subject ?? false
    this.provider = new BasicTracerProvider({
      resource: resourceFromAttributes({ 'service.name': config.service_name ?? 'portcullis' }),
      sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(config.sample_ratio ?? 0.05) }),
      spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter({
        url: config.endpoint ?? 'http://127.0.0.1:4318/v1/traces',
        ...(config.headers && { headers: config.headers }),
      }), { scheduledDelayMillis: parseDuration(config.export_delay ?? '5s'), maxQueueSize: 8192 })],
    })
    this.tracer = this.provider.getTracer('portcullis')
  }

  /** The server span of a request, child of the client's `traceparent` when it sends a valid one. */
  startRequest(req: IncomingMessage): { span: Span; context: Context } {
    const parent = this.propagator.extract(ROOT_CONTEXT, req.headers, getter)
    const span = this.tracer.startSpan(req.method ?? 'HTTP', {
      kind: SpanKind.SERVER,
      attributes: {
        'http.request.method': req.method ?? '_OTHER',
        'url.path': (req.url ?? '').split('?', 1)[0]!,
        'url.scheme': 'encrypted' in req.socket ? 'https' : 'http',
        'network.protocol.version': req.httpVersion,
        'client.address': req.socket.remoteAddress ?? '',
      },
    }, parent)
    return { span, context: trace.setSpan(parent, span) }
  }

  /** A span under `parent`, or under the span of the request being served (AsyncLocalStorage), or a root. */
  startChild(name: string, kind: SpanKind, attributes: Attributes = {}, parent?: Context): { span: Span; context: Context } {
    const context = parent ?? this.current.getStore() ?? ROOT_CONTEXT
    const span = this.tracer.startSpan(name, { kind, attributes }, context)
    return { span, context: trace.setSpan(context, span) }
  }

  /** Runs `task` with `context` as the parent of the spans started inside it (JWKS fetches, introspection calls). */
  within<T>(context: Context, task: () => T): T {
    return this.current.run(context, task)
  }

  /** `traceparent` (and `tracestate`) of `context` into the upstream's request headers, replacing the client's. */
  inject(context: Context, headers: Record<string, string | string[] | undefined>): void {
    delete headers.traceparent
    delete headers.tracestate
    this.propagator.inject(context, headers, { set: (carrier, key, value) => { carrier[key] = value } })
  }

  /** The trace id of the request's span for the log line; undefined when it is not sampled. */
  static traceIdOf(span: Span): string | undefined {
    const spanContext = span.spanContext()
    return span.isRecording() ? spanContext.traceId : undefined
  }

  async shutdown(): Promise<void> {
    await this.provider.shutdown()
  }
}

/** Ends `span` with the outcome of an HTTP exchange: ERROR for a 5xx (semantic conventions: a server span's 4xx is not an error). */
export function endHttpSpan(span: Span, status: number, server = true): void {
  span.setAttribute('http.response.status_code', status)
  if (status >= 500 || (!server && status >= 400)) span.setStatus({ code: SpanStatusCode.ERROR })
  span.end()
}

/**
 * `task` in a CLIENT span `name` under the request being served (a JWKS fetch, an introspection call), which
 * `task` may give its response status; a rejection marks it ERROR. With tracing off, `task` alone.
 */
export async function withClientSpan<T>(name: string, attributes: Attributes, task: (span: Span | undefined) => Promise<T>): Promise<T> {
  const tracer = active
  if (tracer === null) return task(undefined)
  const { span, context } = tracer.startChild(name, SpanKind.CLIENT, attributes)
  try {
    return await tracer.within(context, () => task(span))
  } catch (error) {
    span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.name : 'error' })
    throw error
  } finally {
    span.end()
  }
}

/** The process's tracing, set once at start (null: off); read by the modules that make spans. */
let active: Tracing | null = null

export function setTracing(tracing: Tracing | null): void {
  active = tracing
}

export function tracing(): Tracing | null {
  return active
}
