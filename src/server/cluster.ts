/**
 * `server.workers`: several worker processes serve the same listeners (node:cluster with
 * SCHED_NONE: each accepts on the shared socket, the OS spreads the connections; nothing passes through
 * the primary). The primary only supervises:
 *
 * - it starts the first worker alone (it creates or migrates the SQLite store and its first keys), then the
 *   others at once; a worker that dies is started again after a backoff (100 ms, doubling to 10 s; back to
 *   100 ms once a worker has lived a minute);
 * - SIGHUP is passed to every worker as a reload; SIGTERM and SIGINT to every worker as a drain, and the
 *   primary exits when they all have;
 * - it relays revocations from one worker to the others, keeps the brute-force counters
 *   (rate-limiter-flexible's RateLimiterClusterMaster), the marks of DPoP proofs used and the rate limits' buckets
 *   with the memory store (ratelimit/shared.ts), so all four hold across workers;
 * - it serves the admin listener: one `/metrics` scrape of every worker (prom-client's AggregatorRegistry:
 *   counters summed, histograms merged, process metrics apart by their `worker` label), `/healthz`, and
 *   `/readyz` (every worker running and ready).
 */
import cluster, { type Worker } from 'node:cluster'
import { randomBytes } from 'node:crypto'
import { availableParallelism } from 'node:os'
import type { FastifyInstance } from 'fastify'
import pino from 'pino'
import { AggregatorRegistry } from 'prom-client'
import { RateLimiterClusterMaster } from 'rate-limiter-flexible'
import type { GatewayConfig } from '../config/schema.js'
import { parseListen } from '../config/listen.js'
import { FirstUseMarks, isClusterMessage, type ClusterMessage } from './cluster-messages.js'
import { answerRates } from './cluster-rates.js'
import { SharedBucketsHost } from '../ratelimit/shared.js'
import { adminServer } from './admin.js'
import { workerExecArgv } from './young-generation.js'

const FIRST_BACKOFF_MS = 100
const MAX_BACKOFF_MS = 10_000
/** A worker that lived this long resets the backoff. */
const STABLE_MS = 60_000
/** A worker asked whether it is ready has this long to answer. */
const READINESS_TIMEOUT_MS = 2000

/** The workers alive and connected now. */
function connectedWorkers(): Worker[] {
  return Object.values(cluster.workers ?? {}).filter((worker): worker is Worker => worker !== undefined && worker.isConnected())
}

/** How many workers `server.workers` asks for. */
export function workerCount(config: GatewayConfig): number {
  const workers = config.server?.workers
  return workers === 'auto' ? availableParallelism() : workers ?? 1
}

export interface Primary {
  /** Resolves once every worker has started. */
  readonly started: Promise<void>
  readonly admin: FastifyInstance | undefined
  shutdown(signal: string): Promise<void>
}

export async function runPrimary(config: GatewayConfig, count: number): Promise<Primary> {
  const log = pino({ level: config.log?.level ?? 'info' }).child({ component: 'primary' })
  // Before the first fork: the workers accept on the shared socket themselves.
  cluster.schedulingPolicy = cluster.SCHED_NONE
  cluster.setupPrimary({ execArgv: workerExecArgv(process.execArgv, process.env.NODE_OPTIONS) })
  new RateLimiterClusterMaster()
  const aggregator = new AggregatorRegistry()
  let stopping = false
  let backoff = FIRST_BACKOFF_MS
  const startedAt = new Map<Worker, number>()

  const relay = (from: Worker, message: ClusterMessage) => {
    for (const worker of connectedWorkers()) if (worker !== from) worker.send(message)
  }
  const marks = new FirstUseMarks()
  const rates = new SharedBucketsHost()
  // `dpop.nonce` without `nonce_secret`: one key for every worker, replacements included, asked for at start.
  const nonceKey = randomBytes(32).toString('base64url')
  cluster.on('message', (worker, message: unknown) => {
    if (!isClusterMessage(message)) return
    if (message.portcullis === 'broadcast') relay(worker, message)
    if (message.portcullis === 'nonce-key?' && worker.isConnected()) worker.send({ portcullis: 'nonce-key', key: nonceKey } satisfies ClusterMessage)
    if (message.portcullis === 'rate?' && worker.isConnected()) worker.send(answerRates(rates, message))
    if (message.portcullis === 'first-use?' && worker.isConnected()) {
      worker.send({ portcullis: 'first-use', id: message.id, first: marks.firstUse(message.key, message.ttlSeconds) } satisfies ClusterMessage)
    }
  })

  /** Forks a worker; resolves once it says it listens, rejects if it exits first. */
  const fork = (): Promise<Worker> => new Promise((resolve, reject) => {
    const worker = cluster.fork()
    startedAt.set(worker, Date.now())
    const onMessage = (message: unknown) => {
      if (!isClusterMessage(message) || message.portcullis !== 'started') return
      worker.off('message', onMessage)
      worker.off('exit', onEarlyExit)
      log.info({ worker: worker.id, pid: worker.process.pid }, 'worker started')
      resolve(worker)
    }
    const onEarlyExit = (code: number | null, signal: string | null) => reject(new Error(`worker ${worker.id} exited (${signal ?? code}) before it listened`))
    worker.on('message', onMessage)
    worker.once('exit', onEarlyExit)
  })

  cluster.on('exit', (worker, code, signal) => {
    const lived = Date.now() - (startedAt.get(worker) ?? Date.now())
    startedAt.delete(worker)
    if (stopping) return
    if (lived >= STABLE_MS) backoff = FIRST_BACKOFF_MS
    log.error({ worker: worker.id, pid: worker.process.pid, code, signal, restartInMs: backoff }, 'worker exited; starting another')
    const delay = backoff
    backoff = Math.min(backoff * 2, MAX_BACKOFF_MS)
    setTimeout(() => {
      if (!stopping) fork().catch((error: unknown) => log.error({ err: error }, 'a replacement worker failed to start'))
    }, delay).unref()
  })

  // The first worker alone: it creates the store's tables and first keys; the others find them there.
  const started = fork().then(() => Promise.all(Array.from({ length: count - 1 }, fork))).then(() => {
    log.info({ workers: count }, 'all workers started')
  })

  let readinessId = 0
  const readiness = async (): Promise<string[]> => {
    const workers = connectedWorkers()
    const problems: string[] = []
    if (workers.length < count) problems.push(`${workers.length} of ${count} workers running`)
    const answers = await Promise.all(workers.map((worker) => new Promise<readonly string[]>((resolve) => {
      // One id per question: two scrapes at once each get their own answers.
      const id = ++readinessId
      const timer = setTimeout(() => { worker.off('message', onAnswer); resolve([`worker ${worker.id} did not answer`]) }, READINESS_TIMEOUT_MS)
      const onAnswer = (message: unknown) => {
        if (!isClusterMessage(message) || message.portcullis !== 'readiness' || message.id !== id) return
        clearTimeout(timer)
        worker.off('message', onAnswer)
        resolve(message.problems.map((problem) => `worker ${worker.id}: ${problem}`))
      }
      worker.on('message', onAnswer)
      worker.send({ portcullis: 'readiness?', id } satisfies ClusterMessage)
    })))
    return [...problems, ...answers.flat()]
  }

  let admin: FastifyInstance | undefined
  if (config.admin?.listen !== undefined) {
    admin = await adminServer({ metrics: () => aggregator.clusterMetrics(), contentType: aggregator.contentType, readiness })
    const at = parseListen(config.admin.listen)
    await admin.listen({ host: at.host, port: at.port })
  }

  process.on('SIGHUP', () => {
    for (const worker of connectedWorkers()) worker.send({ portcullis: 'reload' } satisfies ClusterMessage)
  })

  let stopped: Promise<void> | undefined
  const shutdown = (signal: string) => (stopped ??= (async () => {
    stopping = true
    log.info({ signal }, 'shutting down: draining every worker')
    const exits = Object.values(cluster.workers ?? {}).filter((worker): worker is Worker => worker !== undefined).map((worker) => {
      const exited = new Promise<void>((resolve) => { if (worker.isDead()) resolve(); else worker.once('exit', () => resolve()) })
      // Each worker drains as one process does (server.shutdown_timeout), then exits.
      worker.process.kill('SIGTERM')
      return exited
    })
    await Promise.all(exits)
    await admin?.close()
    log.info('every worker has exited')
  })())

  return { started, admin, shutdown }
}
