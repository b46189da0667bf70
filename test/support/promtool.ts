/** Prometheus's own linter, `promtool check metrics` (Debian's `prometheus` package), on a scrape's text. */
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'

export const PROMTOOL = existsSync('/usr/bin/promtool') ? '/usr/bin/promtool' : undefined
export const PROMTOOL_SKIPPED = 'skipped when /usr/bin/promtool is absent: apt-get install prometheus'

/** promtool's exit status and what it printed (its complaints, one per line). */
export function promtoolCheck(exposition: string): { status: number | null; output: string } {
  const run = spawnSync(PROMTOOL!, ['check', 'metrics'], { input: exposition, encoding: 'utf8' })
  return { status: run.status, output: `${run.stdout}${run.stderr}`.trim() }
}
