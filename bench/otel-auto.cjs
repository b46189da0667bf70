// Preloaded (`node --require`) into bench/minimal-proxy.mjs by bench/auto-instrumentation.mjs: OpenTelemetry's
// blanket HTTP auto-instrumentation (@opentelemetry/instrumentation-http) with 5 % sampling and a batch
// processor, spans sent nowhere: what an operator gets from "turn on auto-instrumentation", for comparison
// with Portcullis's own spans (issue 22).
const { NodeTracerProvider } = require('@opentelemetry/sdk-trace-node')
const { BatchSpanProcessor, ParentBasedSampler, TraceIdRatioBasedSampler } = require('@opentelemetry/sdk-trace-base')
const { registerInstrumentations } = require('@opentelemetry/instrumentation')
const { HttpInstrumentation } = require('@opentelemetry/instrumentation-http')

let exported = 0
const exporter = { export(spans, done) { exported += spans.length; done({ code: 0 }) }, shutdown: async () => {} }
const provider = new NodeTracerProvider({
  sampler: new ParentBasedSampler({ root: new TraceIdRatioBasedSampler(0.05) }),
  spanProcessors: [new BatchSpanProcessor(exporter, { scheduledDelayMillis: 1000 })],
})
provider.register()
registerInstrumentations({ instrumentations: [new HttpInstrumentation()] })
process.on('SIGTERM', () => { process.stderr.write(`spans exported: ${exported}\n`); process.exit(0) })
