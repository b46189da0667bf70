/**
 * A counter and a histogram for the per-request metrics, counted in plain numbers and rendered only when
 * Prometheus scrapes. prom-client's own children validate and hash their labels on every inc/observe
 * (about 1 µs each, three per proxied request); these take a child once per label set and then only add.
 * They register in a prom-client Registry like its own metrics (the `get()` contract of registry.js), so
 * the exposition format, names and labels are unchanged.
 */
import type { Registry } from 'prom-client'

type Labels<Name extends string> = Record<Name, string>

interface Series<Name extends string> {
  readonly labels: Labels<Name>
}

/** What registry.getMetricsAsString reads from a metric. */
interface MetricValue {
  readonly value: number
  readonly labels: Record<string, string | number>
  readonly metricName?: string
}

abstract class PlainMetric<Name extends string, S extends Series<Name>> {
  abstract readonly type: 'counter' | 'histogram'
  readonly aggregator = 'sum' as const
  protected readonly series = new Map<string, S>()

  constructor(readonly name: string, readonly help: string, readonly labelNames: readonly Name[], registry: Registry) {
    registry.registerMetric(this as never)
  }

  /**
   * The series of these label values, in the order of `labelNames`, made on first use: one string key and
   * one map lookup, no label object per call. Label values must be bounded by the caller.
   */
  protected child(values: readonly string[], make: (labels: Labels<Name>) => S): S {
    const key = values.join('\u0000')
    let found = this.series.get(key)
    if (!found) {
      found = make(Object.fromEntries(this.labelNames.map((name, i) => [name, values[i]!])) as Labels<Name>)
      this.series.set(key, found)
    }
    return found
  }

  reset(): void {
    this.series.clear()
  }

  abstract get(): { name: string; help: string; type: string; aggregator: string; values: MetricValue[] }
}

interface CounterSeries<Name extends string> extends Series<Name> { value: number }

export class PlainCounter<Name extends string> extends PlainMetric<Name, CounterSeries<Name>> {
  readonly type = 'counter'

  /** The series of these label values (in `labelNames` order), to increment: `counter.labels(…).value++`. */
  labels(...values: string[]): CounterSeries<Name> {
    return this.child(values, (labels) => ({ labels, value: 0 }))
  }

  get() {
    return {
      name: this.name, help: this.help, type: this.type, aggregator: this.aggregator,
      values: [...this.series.values()].map(({ labels, value }) => ({ labels, value })),
    }
  }
}

interface HistogramSeries<Name extends string> extends Series<Name> {
  /** Observations per bucket, not cumulative; the last one is +Inf. */
  readonly counts: number[]
  sum: number
  count: number
}

export class PlainHistogram<Name extends string> extends PlainMetric<Name, HistogramSeries<Name>> {
  readonly type = 'histogram'

  constructor(name: string, help: string, labelNames: readonly Name[], private readonly buckets: readonly number[], registry: Registry) {
    super(name, help, labelNames, registry)
  }

  /** Counts `value` in the series of these label values (in `labelNames` order). */
  observe(value: number, ...values: string[]): void {
    const series = this.child(values, (labels) => ({ labels, counts: new Array<number>(this.buckets.length + 1).fill(0), sum: 0, count: 0 }))
    const { buckets } = this
    let i = 0
    while (i < buckets.length && value > buckets[i]!) i++
    series.counts[i]!++
    series.sum += value
    series.count++
  }

  get() {
    const values: MetricValue[] = []
    for (const { labels, counts, sum, count } of this.series.values()) {
      let cumulative = 0
      this.buckets.forEach((le, i) => {
        cumulative += counts[i]!
        values.push({ labels: { le, ...labels }, value: cumulative, metricName: `${this.name}_bucket` })
      })
      values.push({ labels: { le: '+Inf', ...labels }, value: count, metricName: `${this.name}_bucket` })
      values.push({ labels, value: sum, metricName: `${this.name}_sum` })
      values.push({ labels, value: count, metricName: `${this.name}_count` })
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values }
  }
}
