/**
 * Private redis-server processes for fault tests (stopped, restarted, on a port of their own), and cleanup
 * of a prefix on a shared Redis.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { closedPort } from './upstream.js'

export function redisServerInstalled(): boolean {
  return spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status === 0
}

export interface PrivateRedis {
  readonly port: number
  readonly url: string
  /** SIGTERM: Redis shuts down cleanly, like `redis-cli shutdown`; SIGKILL: it dies on the spot. */
  stop(signal?: 'SIGTERM' | 'SIGKILL'): Promise<void>
  /** SIGSTOP / SIGCONT: Redis keeps its connections open and answers nothing, as a hung server would. */
  pause(): void
  resume(): void
  /** Starts it again on the same port, with the same data directory. */
  start(): Promise<void>
  /** Stops it (if running) and deletes its data directory. */
  close(): Promise<void>
}

export interface PrivateRedisOptions {
  /** AOF on, fsynced on every write: whatever Redis acknowledged survives a restart. */
  persistent?: boolean
}

export async function startPrivateRedis(options: PrivateRedisOptions = {}): Promise<PrivateRedis> {
  const port = await closedPort()
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-redis-'))
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--daemonize', 'no',
    ...(options.persistent ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no'])]
  let child: ChildProcess | undefined

  const start = async () => {
    const started = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] })
    child = started
    await new Promise<void>((resolve, reject) => {
      let output = ''
      const timer = setTimeout(() => reject(new Error(`redis-server on port ${port} did not start:\n${output}`)), 10_000)
      started.stdout!.on('data', (chunk: Buffer) => {
        output += String(chunk)
        if (output.includes('Ready to accept connections')) {
          clearTimeout(timer)
          resolve()
        }
      })
      started.stderr!.on('data', (chunk: Buffer) => { output += String(chunk) })
      started.once('error', (error) => { clearTimeout(timer); reject(error) })
      started.once('exit', (code) => { clearTimeout(timer); reject(new Error(`redis-server exited with ${code}:\n${output}`)) })
    })
    // Keep draining its log, or a full pipe would block it.
    started.stdout!.resume()
  }
  const stop = async (signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM') => {
    const running = child
    child = undefined
    if (!running || running.exitCode !== null || running.signalCode !== null) return
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()))
    running.kill('SIGCONT')
    running.kill(signal)
    await exited
  }

  await start()
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    stop,
    start,
    pause: () => { child?.kill('SIGSTOP') },
    resume: () => { child?.kill('SIGCONT') },
    close: async () => {
      await stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Deletes every key under `prefix` (SCAN, never FLUSHALL: the Redis may be shared). */
export async function deleteKeys(url: string, prefix: string): Promise<void> {
  const redis = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    await redis.connect()
    for (const key of await keysUnder(redis, prefix)) await redis.del(key)
  } finally {
    redis.disconnect()
  }
}

export async function keysUnder(redis: Redis, prefix: string): Promise<string[]> {
  const keys: string[] = []
  // SCAN's MATCH is a glob: escape its special characters in the prefix.
  const pattern = `${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`
  let cursor = '0'
  do {
    const [next, batch] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000)
    keys.push(...batch)
    cursor = next
  } while (cursor !== '0')
  return keys
}

/** A Redis Sentinel (redis-server --sentinel) watching the primary on `primaryPort` as `name`. */
export async function startSentinel(primaryPort: number, name = 'mymaster'): Promise<{ port: number; close(): Promise<void> }> {
  const port = await closedPort()
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-sentinel-'))
  const conf = path.join(dir, 'sentinel.conf')
  writeFileSync(conf, [
    `port ${port}`, 'bind 127.0.0.1', `dir ${dir}`,
    `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 1`,
    `sentinel down-after-milliseconds ${name} 2000`,
  ].join('\n') + '\n')
  const child = spawn('redis-server', [conf, '--sentinel'], { stdio: ['ignore', 'pipe', 'pipe'] })
  await new Promise<void>((resolve, reject) => {
    let output = ''
    const timer = setTimeout(() => reject(new Error(`redis sentinel on port ${port} did not start:\n${output}`)), 10_000)
    child.stdout!.on('data', (chunk: Buffer) => {
      output += String(chunk)
      if (output.includes(`+monitor master ${name}`)) {
        clearTimeout(timer)
        resolve()
      }
    })
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`redis sentinel exited with ${code}:\n${output}`)) })
  })
  child.stdout!.resume()
  return {
    port,
    close: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return
      const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
      child.kill('SIGTERM')
      await exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
