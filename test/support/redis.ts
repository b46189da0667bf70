/**
 * Private redis-server processes for fault tests (stopped, restarted, on a port of their own), and cleanup
 * of a prefix on a shared Redis.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { subscriberName } from '../../src/authserver/broadcast.js'
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
  /** More redis-server arguments (cluster mode). */
  args?: string[]
}

export async function startPrivateRedis(options: PrivateRedisOptions = {}): Promise<PrivateRedis> {
  const port = await closedPort()
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-redis-'))
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--dir', dir, '--save', '', '--daemonize', 'no',
    ...(options.persistent ? ['--appendonly', 'yes', '--appendfsync', 'always'] : ['--appendonly', 'no']), ...options.args ?? []]
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

/**
 * Drops the subscribed connections of the instances on `channel` (CLIENT KILL by id), as a network blip
 * would, leaving every other client of a shared Redis alone. Returns how many were killed.
 */
export async function killSubscribers(redis: Redis, channel: string): Promise<number> {
  const list = String(await redis.call('CLIENT', 'LIST', 'TYPE', 'pubsub'))
  const ids = list.split('\n').filter((line) => line.includes(` name=${subscriberName(channel)} `)).map((line) => /\bid=(\d+)/.exec(line)![1]!)
  for (const id of ids) await redis.client('KILL', 'ID', id)
  return ids.length
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

export interface PrivateCluster {
  /** `redis+cluster://` naming every primary (any one would do: ioredis discovers the rest). */
  readonly url: string
  readonly nodes: readonly PrivateRedis[]
  /** The node that serves the slot of `key` now (CLUSTER KEYSLOT, CLUSTER SLOTS). */
  primaryFor(key: string): Promise<PrivateRedis>
  close(): Promise<void>
}

/**
 * A Redis Cluster of private redis-server processes: `primaries` primaries, each with `replicasPerPrimary`
 * replicas, created with `redis-cli --cluster create`, ready once every node reports cluster_state:ok.
 * A short cluster-node-timeout lets a replica take over a killed primary within seconds.
 */
export async function startPrivateCluster(primaries = 3, replicasPerPrimary = 0): Promise<PrivateCluster> {
  const nodes: PrivateRedis[] = []
  const close = async () => { await Promise.all(nodes.map((node) => node.close())) }
  try {
    for (let i = 0; i < primaries * (1 + replicasPerPrimary); i++) {
      nodes.push(await startPrivateRedis({ args: ['--cluster-enabled', 'yes', '--cluster-config-file', 'nodes.conf', '--cluster-node-timeout', '1000'] }))
    }
    const created = spawnSync('redis-cli', ['--cluster', 'create', ...nodes.map((node) => `127.0.0.1:${node.port}`),
      '--cluster-replicas', String(replicasPerPrimary), '--cluster-yes'], { encoding: 'utf8' })
    if (created.status !== 0) throw new Error(`redis-cli --cluster create failed:\n${created.stdout}${created.stderr}`)
    const deadline = Date.now() + 20_000
    for (const node of nodes) {
      const client = new Redis(node.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1 })
      try {
        await client.connect()
        while (!String(await client.cluster('INFO')).includes('cluster_state:ok')) {
          if (Date.now() > deadline) throw new Error(`the cluster node on ${node.port} never reported cluster_state:ok`)
          await new Promise((resolve) => setTimeout(resolve, 100))
        }
      } finally {
        client.disconnect()
      }
    }
  } catch (error) {
    await close()
    throw error
  }
  /** Asks the first node that answers (a test may have stopped some). */
  const primaryFor = async (key: string): Promise<PrivateRedis> => {
    for (const asked of nodes) {
      const client = new Redis(asked.port, '127.0.0.1', { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null })
      client.on('error', () => { /* a stopped node: ask the next */ })
      try {
        await client.connect()
      } catch {
        client.disconnect()
        continue
      }
      try {
        return await slotOwner(client, key)
      } finally {
        client.disconnect()
      }
    }
    throw new Error('no node of the cluster answers')
  }
  const slotOwner = async (client: Redis, key: string) => {
    {
      const slot = Number(await client.cluster('KEYSLOT', key))
      const ranges = await client.cluster('SLOTS')
      const range = ranges.find(([from, to]) => slot >= from && slot <= to)
      const node = nodes.find((candidate) => candidate.port === range?.[2]?.[1])
      if (!node) throw new Error(`no node serves slot ${slot}`)
      return node
    }
  }
  return {
    url: `redis+cluster://${nodes.slice(0, primaries).map((node) => `127.0.0.1:${node.port}`).join(',')}`,
    nodes,
    primaryFor,
    close,
  }
}
