/** Log output captured by a test, a line per element (a write may carry several lines: src/server/log-output.ts). */
import { Writable } from 'node:stream'

export function lineCollector(): { lines: string[]; stream: Writable } {
  const lines: string[] = []
  const stream = new Writable({
    write(chunk, _encoding, callback) {
      // Each line keeps its newline, as a log consumer reading lines sees it.
      for (const line of String(chunk).split(/(?<=\n)/)) if (line !== '') lines.push(line)
      callback()
    },
  })
  return { lines, stream }
}
