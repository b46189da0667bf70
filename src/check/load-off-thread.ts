/**
 * `loadConfig` on a worker thread, for hot reloads: parsing and checking a large file (10,000 routes take most of
 * a second, docs/performance.md) must not hold the event loop, and the requests in flight with it. A thread does
 * one load and is ended with it, so the memory a large parse takes goes with it. With a large route table the
 * thread of the next load is started ahead ({@link ConfigLoader.keepAheadFor}): it waits with its modules loaded, and
 * a reload does not wait for that (a quarter to half a second). The routes come back in pieces, one taken in per
 * event-loop turn (the young generation collected after each, common/young-collection.ts). Run from the TypeScript
 * sources (the test runner), where there is no compiled worker next to this module, it is the same load on this
 * thread.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { nextTurn } from '../common/slices.js'
import { collectYoung } from '../common/young-collection.js'
import { ConfigError, freezeConfig, loadConfig, type ConfigIssue } from './load.js'

const WORKER = new URL('./load-worker.js', import.meta.url)

/**
 * From this many routes, the next load's thread is started ahead. An idle thread with the loader's modules holds
 * about 30 MB; below this size a load takes a small part of a second anyway (docs/performance.md, routes).
 */
export const LOAD_AHEAD_ROUTES = 1_000

type Answer = { ok: true; config: GatewayConfig; pieces: number } | { ok: false; fileName?: string; issues?: ConfigIssue[]; message?: string }

/** Loads configs off the event loop, one thread per load; see the module's comment. */
export class ConfigLoader {
  #ahead: Worker | undefined
  #keepAhead = false
  readonly #compiled = existsSync(fileURLToPath(WORKER))

  /**
   * Whether the next load's thread waits started: with the config in service from {@link LOAD_AHEAD_ROUTES} routes.
   * The caller asks again once a reload is over, new table built and all: a thread started meanwhile would compete
   * with the build for the core.
   */
  keepAheadFor(config: GatewayConfig): void {
    this.#keepAhead = config.routes.length >= LOAD_AHEAD_ROUTES && this.#compiled
    if (this.#keepAhead) this.#startAhead()
    else void this.#stopAhead()
  }

  load(fileName: string, text: string, env: NodeJS.ProcessEnv): Promise<GatewayConfig> {
    if (!this.#compiled) return Promise.resolve().then(() => loadConfig(fileName, text, env))
    const worker = this.#ahead ?? startLoader()
    this.#ahead = undefined
    worker.ref()
    return loadOn(worker, fileName, text, env)
  }

  /** Ends the thread waiting ahead, if any (shutdown). */
  close(): Promise<void> {
    this.#keepAhead = false
    return this.#stopAhead()
  }

  #startAhead(): void {
    if (this.#ahead !== undefined) return
    const worker = startLoader(true)
    // Idle, it must not keep the process alive; one that fails before its load is simply not taken.
    worker.unref()
    const gone = () => { if (this.#ahead === worker) this.#ahead = undefined }
    worker.once('error', gone).once('exit', gone)
    this.#ahead = worker
  }

  async #stopAhead(): Promise<void> {
    const worker = this.#ahead
    this.#ahead = undefined
    await worker?.terminate()
  }
}

/** A loader thread; one started ahead warms its code up on a small config while it waits (load-worker.ts). */
function startLoader(warmUp = false): Worker {
  const worker = new Worker(WORKER, { workerData: { warmUp } })
  // A failure before the load is answered by loadOn, or, for a thread waiting ahead, by its not being taken.
  worker.on('error', () => {})
  return worker
}

function loadOn(worker: Worker, fileName: string, text: string, env: NodeJS.ProcessEnv): Promise<GatewayConfig> {
  const { port1: routesIn, port2: routesOut } = new MessageChannel()
  return new Promise<GatewayConfig>((resolve, reject) => {
    let answered = false
    worker.once('message', (answer: Answer) => {
      answered = true
      if (answer.ok) resolve(takeRoutes(answer.config, answer.pieces, routesIn))
      else if (answer.issues !== undefined) reject(new ConfigError(answer.fileName ?? fileName, answer.issues))
      else reject(new Error(answer.message ?? 'the config could not be loaded'))
      void worker.terminate()
    })
    worker.once('error', (error) => { answered = true; reject(error) })
    worker.once('exit', (code) => { if (!answered) reject(new Error(`the config loader stopped (exit code ${code})`)) })
    worker.postMessage({ fileName, text, env: { ...env }, routesPort: routesOut }, [routesOut])
  }).finally(() => routesIn.close())
}

/** The worker posted every piece before its answer: each is there to take, one per event-loop turn. */
async function takeRoutes(config: GatewayConfig, pieces: number, routesIn: MessagePort): Promise<GatewayConfig> {
  const routes: RouteConfig[] = []
  for (let piece = 0; piece < pieces; piece++) {
    if (piece > 0) {
      collectYoung()
      await nextTurn()
    }
    const received = receiveMessageOnPort(routesIn)
    if (received === undefined) throw new Error('the config loader sent fewer routes than it loaded')
    for (const route of received.message as RouteConfig[]) routes.push(freezeConfig(route))
  }
  return freezeConfig({ ...config, routes })
}
