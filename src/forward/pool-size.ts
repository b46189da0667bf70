/** How many requests an upstream's pool and a client address may have in flight (config only: no client loaded here). */
import type { UpstreamConfig } from '../config/schema.js'

/** Requests at once on one HTTP/2 connection to an upstream (undici's default for a node HTTP/2 server's 100). */
export const STREAMS_PER_CONNECTION = 100

/** `server.body_streams_per_address` by default. */
export const DEFAULT_STREAMS_PER_ADDRESS = 4

/**
 * `upstreams.<name>.connections` (times the streams of each, with HTTP/2), and the half of them request bodies that
 * stream from clients may hold at once.
 */
export function poolSize(config: UpstreamConfig): { connections: number; maxStreaming: number } {
  const connections = (config.connections ?? 128) * (config.http2 === true ? STREAMS_PER_CONNECTION : 1)
  return { connections, maxStreaming: Math.max(1, Math.floor(connections / 2)) }
}
