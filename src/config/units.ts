/** Durations (`30s`, `5m`, `1h`, `30d`, `250ms`) and binary sizes (`1kb` = 1024 bytes) of the config file. */
const DURATION_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const
const SIZE_BYTES = { b: 1, kb: 1024, mb: 1024 ** 2, gb: 1024 ** 3 } as const

export function parseDuration(text: string): number {
  const match = /^([0-9]+)(ms|s|m|h|d)$/.exec(text)
  if (!match) throw new TypeError(`not a duration: ${text}`)
  return Number(match[1]) * DURATION_MS[match[2] as keyof typeof DURATION_MS]
}

export function parseSize(text: string): number {
  const match = /^([0-9]+)(b|kb|mb|gb)$/.exec(text)
  if (!match) throw new TypeError(`not a size: ${text}`)
  return Number(match[1]) * SIZE_BYTES[match[2] as keyof typeof SIZE_BYTES]
}
