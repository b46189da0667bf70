/**
 * Process metrics: prom-client's defaults (CPU, memory, event loop lag, GC, handles), prefixed like ours, per
 * worker under `server.workers`. Three of prom-client's gauges are named `…_total`, which Prometheus keeps for
 * counters (`promtool check metrics` fails on them): they are registered here without that suffix instead, as
 * `…_all` (the count over all types; the per-type gauges keep their names). docs/metrics.md lists the old names.
 */
import { Gauge, collectDefaultMetrics, type Registry } from 'prom-client'

const PREFIX = 'portcullis_'

/** prom-client's name, ours, and what it counts. */
const RENAMED: ReadonlyArray<readonly [string, string, string, () => number]> = [
  ['nodejs_active_handles_total', 'nodejs_active_handles_all', 'Active libuv handles, all types together.', () => activeCount('_getActiveHandles')],
  ['nodejs_active_requests_total', 'nodejs_active_requests_all', 'Active libuv requests, all types together.', () => activeCount('_getActiveRequests')],
  ['nodejs_active_resources_total', 'nodejs_active_resources_all', 'Active resources keeping the event loop alive, all types together.',
    () => process.getActiveResourcesInfo().length],
]

/** node's undocumented counters prom-client reads too; 0 where a node lacks them. */
function activeCount(name: '_getActiveHandles' | '_getActiveRequests'): number {
  const read = (process as unknown as Record<string, (() => unknown[]) | undefined>)[name]
  return typeof read === 'function' ? read.call(process).length : 0
}

/** Registers the process metrics in `registry`, labelled with the worker's id when there is one. */
export function registerProcessMetrics(registry: Registry, worker: number | undefined): void {
  const labels = worker === undefined ? undefined : { worker: String(worker) }
  collectDefaultMetrics({ register: registry, prefix: PREFIX, ...(labels && { labels }) })
  for (const [old, name, help, read] of RENAMED) {
    registry.removeSingleMetric(PREFIX + old)
    new Gauge({
      name: PREFIX + name,
      help,
      labelNames: labels ? ['worker'] : [],
      registers: [registry],
      collect() {
        if (labels) this.set(labels, read())
        else this.set(read())
      },
    })
  }
}
