/**
 * A reader of the Prometheus text exposition format (0.0.4), as a scraper reads it: `# HELP` and `# TYPE`
 * lines, then one sample per line, `name{label="value",…} value`, label values escaped with \\, \" and \n.
 */

export interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

export interface Scrape {
  readonly text: string
  readonly samples: readonly Sample[]
  /** Metric family name → its type (counter, gauge, histogram, summary, untyped). */
  readonly types: ReadonlyMap<string, string>
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)(?:\s+-?\d+)?$/
const LABEL = /\s*([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"\s*(,|$)/y

function unescape(value: string): string {
  return value.replace(/\\(.)/g, (_all, char: string) => (char === 'n' ? '\n' : char))
}

function parseLabels(text: string, line: string): Record<string, string> {
  const labels: Record<string, string> = {}
  LABEL.lastIndex = 0
  while (LABEL.lastIndex < text.length) {
    const match = LABEL.exec(text)
    if (!match) throw new Error(`unreadable labels in: ${line}`)
    labels[match[1]!] = unescape(match[2]!)
  }
  return labels
}

function parseValue(text: string): number {
  if (text === '+Inf') return Infinity
  if (text === '-Inf') return -Infinity
  return Number(text)
}

export function parsePrometheusText(text: string): Scrape {
  const samples: Sample[] = []
  const types = new Map<string, string>()
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue
    if (line.startsWith('#')) {
      const type = /^# TYPE (\S+) (\S+)$/.exec(line)
      if (type) types.set(type[1]!, type[2]!)
      continue
    }
    const match = SAMPLE.exec(line)
    if (!match) throw new Error(`unreadable sample: ${line}`)
    samples.push({ name: match[1]!, labels: match[2] ? parseLabels(match[2], line) : {}, value: parseValue(match[3]!) })
  }
  return { text, samples, types }
}

/** GET a /metrics URL and parse it. */
export async function scrape(url: string): Promise<Scrape> {
  const res = await fetch(url)
  if (res.status !== 200) throw new Error(`${url} answered ${res.status}`)
  return parsePrometheusText(await res.text())
}

/** The value of the one sample with exactly these labels; 0 when there is none (a series not yet started). */
export function valueOf(scraped: Scrape, name: string, labels: Record<string, string> = {}): number {
  const wanted = Object.entries(labels)
  const found = scraped.samples.filter((sample) => sample.name === name &&
    Object.keys(sample.labels).length === wanted.length && wanted.every(([key, value]) => sample.labels[key] === value))
  if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${found.length} samples`)
  return found[0]?.value ?? 0
}

/** Every label value in the scrape, with the sample it belongs to (for hygiene assertions). */
export function labelValues(scraped: Scrape): Array<{ name: string; label: string; value: string }> {
  return scraped.samples.flatMap((sample) =>
    Object.entries(sample.labels).map(([label, value]) => ({ name: sample.name, label, value })))
}

/**
 * Metric family names as a PromQL expression names them: the sample name, or a histogram's
 * `_bucket`/`_sum`/`_count` series.
 */
export function exposedNames(scraped: Scrape): Set<string> {
  const names = new Set(scraped.samples.map((sample) => sample.name))
  for (const [name, type] of scraped.types) {
    names.add(name)
    if (type === 'histogram' || type === 'summary') for (const suffix of ['_bucket', '_sum', '_count']) names.add(name + suffix)
  }
  return names
}
