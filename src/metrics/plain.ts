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

/** Series by their label values, one level per label: a lookup hashes strings that already exist. */
type Index<S> = Map<string, Index<S> | S>

function sameValues(a: readonly string[], b: readonly string[]): boolean {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}

abstract class PlainMetric<Name extends string, S extends Series<Name>> {
  abstract readonly type: 'counter' | 'histogram'
  readonly aggregator = 'sum' as const
  /** Every series, in the order they were made (the exposition order). */
  protected series: S[] = []
  private index: Index<S> = new Map()
  /** The label values of the last call and their series (a copy: the caller's array is not kept). */
  private last: { readonly values: readonly string[]; readonly series: S } | undefined

  constructor(readonly name: string, readonly help: string, readonly labelNames: readonly Name[], registry: Registry) {
    if (labelNames.length === 0) throw new TypeError(`${name}: a plain metric needs at least one label`)
    registry.registerMetric(this as never)
  }

  /** A new series with these labels, values at zero. */
  protected abstract create(labels: Labels<Name>): S

  /**
   * The series of these label values, in the order of `labelNames`, made on first use. Each call walks one
   * map per label and allocates nothing: no joined key, no label object. Label values must be bounded by
   * the caller.
   */
  protected child(values: readonly string[]): S {
    // A proxy's requests mostly repeat the last label set (one route, GET, 200, forwarded): compared first.
    const last = this.last
    if (last !== undefined && sameValues(last.values, values)) return last.series
    const found = this.lookup(values)
    this.last = { values: values.slice(), series: found }
    return found
  }

  private lookup(values: readonly string[]): S {
    let node = this.index
    const last = values.length - 1
    for (let i = 0; i < last; i++) {
      let next = node.get(values[i]!) as Index<S> | undefined
      if (next === undefined) {
        next = new Map()
        node.set(values[i]!, next)
      }
      node = next
    }
    let found = node.get(values[last]!) as S | undefined
    if (found === undefined) {
      found = this.create(Object.fromEntries(this.labelNames.map((name, i) => [name, values[i]!])) as Labels<Name>)
      node.set(values[last]!, found)
      this.series.push(found)
    }
    return found
  }

  reset(): void {
    this.series = []
    this.index = new Map()
    this.last = undefined
  }

  abstract get(): { name: string; help: string; type: string; aggregator: string; values: MetricValue[] }
}

interface CounterSeries<Name extends string> extends Series<Name> { value: number }

export class PlainCounter<Name extends string> extends PlainMetric<Name, CounterSeries<Name>> {
  readonly type = 'counter'

  /** The series of these label values (in `labelNames` order), to increment: `counter.labels(…).value++`. */
  labels(...values: string[]): CounterSeries<Name> {
    return this.child(values)
  }

  protected create(labels: Labels<Name>): CounterSeries<Name> {
    return { labels, value: 0 }
  }

  get() {
    return {
      name: this.name, help: this.help, type: this.type, aggregator: this.aggregator,
      values: this.series.map(({ labels, value }) => ({ labels, value })),
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
    const series = this.child(values)
    const { buckets } = this
    let i = 0
    while (i < buckets.length && value > buckets[i]!) i++
    series.counts[i]!++
    series.sum += value
    series.count++
  }

  protected create(labels: Labels<Name>): HistogramSeries<Name> {
    return { labels, counts: new Array<number>(this.buckets.length + 1).fill(0), sum: 0, count: 0 }
  }

  get() {
    const values: MetricValue[] = []
    for (const { labels, counts, sum, count } of this.series) {
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
