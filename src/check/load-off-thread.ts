/**
 * `loadConfig` on a worker thread, for hot reloads: parsing and checking a large file (10,000 routes take most of
 * a second, docs/performance.md) must not hold the event loop, and the requests in flight with it. A thread does
 * one load and is ended with it, so the memory a large parse takes goes with it. With a large route table the
 * thread of the next load is started ahead ({@link ConfigLoader.keepAheadFor}): it waits with its modules loaded, and
 * a reload does not wait for that (a quarter to half a second). The routes come back in pieces, one taken in per
 * event-loop turn (the young generation collected after each, common/young-collection.ts). The thread reads the file
 * and takes its SHA-256 too: the event loop never holds the text (a megabyte for 10,000 routes, read, hashed and
 * copied to the thread on it, then copied twice by the young generation's collections). A route equal to one in service
 * comes back as a number, the place of that one, and the event loop takes the object it serves: a reload that changes a
 * few routes of 10,000 copies in, allocates and compiles those few (the rules of the others are kept: rules/compile.ts,
 * ReusableRules). Run from the TypeScript
 * sources (the test runner), where there is no compiled worker next to this module, it is the same load on this
 * thread.
 */
import { createHash } from 'node:crypto'
import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { nextTurn, runAtOnce, type Steps } from '../common/slices.js'
import { collectYoung } from '../common/young-collection.js'
import { ConfigError, configDigest, freezeConfig, loadConfig, type ConfigIssue } from './load.js'

const WORKER = new URL('./load-worker.js', import.meta.url)

/**
 * From this many routes, the next load's thread is started ahead. An idle thread with the loader's modules holds
 * about 30 MB; below this size a load takes a small part of a second anyway (docs/performance.md, routes).
 */
export const LOAD_AHEAD_ROUTES = 1_000

/** Bytes of a route's key ({@link routeKeys}). */
const KEY_BYTES = 32

/**
 * JSON writes NaN, ±Infinity (which YAML's `.nan` and `.inf` are, and a claim condition's `equals` takes) as `null`, and
 * -0 as 0: written apart here, so that only equal routes have equal keys.
 */
const exactNumbers = (_key: string, value: unknown): unknown =>
  typeof value === 'number' && (!Number.isFinite(value) || Object.is(value, -0)) ? `\u0000number:${Object.is(value, -0) ? '-0' : String(value)}` : value

/**
 * Per route, the SHA-256 of its JSON, one after another: two routes with equal keys are equal (a loaded route is plain
 * data, its `${VAR}`s substituted). About 60 ms for 10,000 routes.
 */
export function routeKeys(routes: readonly RouteConfig[]): Uint8Array {
  return runAtOnce(routeKeySteps(routes))
}

/** The same as steps, a pause allowed every 200 routes (the config served from start, keyed while serving: server/run.ts). */
export function* routeKeySteps(routes: readonly RouteConfig[]): Steps<Uint8Array> {
  const keys = new Uint8Array(routes.length * KEY_BYTES)
  for (let i = 0; i < routes.length; i++) {
    if (i > 0 && i % 200 === 0) yield
    keys.set(createHash('sha256').update(JSON.stringify(routes[i], exactNumbers)).digest(), i * KEY_BYTES)
  }
  return keys
}

/** For each of `keys`, the place of the route of `served` with that key, or -1. */
export function placesIn(keys: Uint8Array, served: Uint8Array | undefined): Int32Array {
  const places = new Int32Array(keys.length / KEY_BYTES).fill(-1)
  if (served === undefined) return places
  const key = (bytes: Uint8Array, i: number) => Buffer.from(bytes.buffer, bytes.byteOffset + i * KEY_BYTES, KEY_BYTES).toString('latin1')
  const byKey = new Map<string, number>()
  for (let i = 0; i < served.length / KEY_BYTES; i++) {
    const k = key(served, i)
    if (!byKey.has(k)) byKey.set(k, i)
  }
  for (let i = 0; i < places.length; i++) places[i] = byKey.get(key(keys, i)) ?? -1
  return places
}

/** The config in service, as a load compares the file with it. */
export interface Served {
  /** Its file's SHA-256: a file of this digest is not loaded (a watch event). Absent: the file is loaded whatever it holds. */
  readonly digest?: string | undefined
  /** Its routes with their keys ({@link routeKeys}): a route of the file equal to one of them comes back as that object. */
  readonly routes?: ServedRoutes | undefined
}

export interface ServedRoutes {
  readonly configs: readonly RouteConfig[]
  readonly keys: Uint8Array
}

/**
 * A reload's file: the SHA-256 of its text, and its config with its routes' keys (to compare the next load with)
 * unless that digest is the one the caller serves (`load`'s `served`): then there is nothing to reload.
 */
export type Reloaded = { readonly digest: string; readonly config?: undefined }
  | { readonly digest: string; readonly config: GatewayConfig; readonly keys: Uint8Array }

/** The config file could not be read: the reload keeps the config in service (and says why apart from an invalid one). */
export class UnreadableConfig extends Error {}

/** A reload's job, as the loader thread gets it (load-worker.ts). */
export interface LoadJob {
  readonly fileName: string
  readonly env: NodeJS.ProcessEnv
  readonly served: string | undefined
  /** The keys of the routes in service. */
  readonly servedKeys: Uint8Array | undefined
  readonly routesPort: MessagePort
}

/** A piece of the routes as the loader thread posts them: a route, or the place of the equal one in service. */
export type RoutesPiece = Array<RouteConfig | number>

export type Answer = { ok: true; digest: string; unchanged: true }
  | { ok: true; digest: string; config: GatewayConfig; pieces: number; keys: Uint8Array }
  | { ok: false; unreadable: string }
  | { ok: false; fileName?: string; issues?: ConfigIssue[]; message?: string }

/** The file's text and its SHA-256; UnreadableConfig when it cannot be read. */
export function readForReload(fileName: string): { text: string; digest: string } {
  let text: string
  try {
    text = readFileSync(fileName, 'utf8')
  } catch (error) {
    throw new UnreadableConfig((error as Error).message)
  }
  return { text, digest: configDigest(text) }
}

/** A reload's read and load, wherever it runs: the file's digest, and its config and route keys unless the digest is `served`. */
export function reloadFile(fileName: string, env: NodeJS.ProcessEnv, served: string | undefined): Reloaded {
  const { text, digest } = readForReload(fileName)
  if (digest === served) return { digest }
  const config = loadConfig(fileName, text, env)
  return { digest, config, keys: routeKeys(config.routes) }
}

/** The load on this thread (no compiled worker): the same answer, routes equal to those in service taken as they are. */
function reloadHere(fileName: string, env: NodeJS.ProcessEnv, served: Served): Reloaded {
  const reloaded = reloadFile(fileName, env, served.digest)
  if (reloaded.config === undefined || served.routes === undefined) return reloaded
  const places = placesIn(reloaded.keys, served.routes.keys)
  const routes = reloaded.config.routes.map((route, i) => places[i]! >= 0 ? served.routes!.configs[places[i]!]! : route)
  return { ...reloaded, config: freezeConfig({ ...reloaded.config, routes }) }
}

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

  /**
   * Reads and loads `fileName`; with `served.digest`, the digest of the config in service, a file of that digest is not
   * loaded (a watch event for a file that did not change) and its thread waits on for the next load. With
   * `served.routes`, a route equal to one in service is that object in the config that comes back.
   */
  load(fileName: string, env: NodeJS.ProcessEnv, served: Served = {}): Promise<Reloaded> {
    if (!this.#compiled) return Promise.resolve().then(() => reloadHere(fileName, env, served))
    const worker = this.#ahead ?? this.#start(false)
    this.#ahead = undefined
    worker.ref()
    return loadOn(worker, { fileName, env: { ...env }, served: served.digest, servedKeys: served.routes?.keys }, served.routes?.configs,
      () => this.#takeBack(worker))
  }

  /** Ends the thread waiting ahead, if any (shutdown). */
  close(): Promise<void> {
    this.#keepAhead = false
    return this.#stopAhead()
  }

  /** A thread whose file was unchanged has loaded nothing: it waits on as the next load's, if one is wanted. */
  #takeBack(worker: Worker): void {
    if (this.#keepAhead && this.#ahead === undefined) {
      worker.unref()
      this.#ahead = worker
    } else {
      void worker.terminate()
    }
  }

  /** A loader thread: one that fails or ends while it waits ahead is simply not taken (any thread may come to wait). */
  #start(warmUp: boolean): Worker {
    const worker = startLoader(warmUp)
    const gone = () => { if (this.#ahead === worker) this.#ahead = undefined }
    worker.once('error', gone).once('exit', gone)
    return worker
  }

  #startAhead(): void {
    if (this.#ahead !== undefined) return
    const worker = this.#start(true)
    // Idle, it must not keep the process alive.
    worker.unref()
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

function loadOn(worker: Worker, job: Omit<LoadJob, 'routesPort'>, servedRoutes: readonly RouteConfig[] | undefined,
  takeBack: () => void): Promise<Reloaded> {
  const { port1: routesIn, port2: routesOut } = new MessageChannel()
  return new Promise<Reloaded>((resolve, reject) => {
    let answered = false
    const onError = (error: Error) => { answered = true; reject(error) }
    const onExit = (code: number) => { if (!answered) reject(new Error(`the config loader stopped (exit code ${code})`)) }
    worker.once('message', (answer: Answer) => {
      answered = true
      worker.off('error', onError).off('exit', onExit)
      if (answer.ok && 'unchanged' in answer) {
        resolve({ digest: answer.digest })
        takeBack()
        return
      }
      if (answer.ok) {
        resolve(takeRoutes(answer.config, answer.pieces, routesIn, servedRoutes ?? []).then((config) => ({ digest: answer.digest, config, keys: answer.keys })))
      }
      else if ('unreadable' in answer) reject(new UnreadableConfig(answer.unreadable))
      else if (answer.issues !== undefined) reject(new ConfigError(answer.fileName ?? job.fileName, answer.issues))
      else reject(new Error(answer.message ?? 'the config could not be loaded'))
      void worker.terminate()
    })
    worker.once('error', onError)
    worker.once('exit', onExit)
    worker.postMessage({ ...job, routesPort: routesOut } satisfies LoadJob, [routesOut])
  }).finally(() => routesIn.close())
}

/**
 * The worker posted every piece before its answer: each is there to take, one per event-loop turn. A number is the
 * place of an equal route in service: that object, frozen already.
 */
async function takeRoutes(config: GatewayConfig, pieces: number, routesIn: MessagePort, served: readonly RouteConfig[]): Promise<GatewayConfig> {
  const routes: RouteConfig[] = []
  for (let piece = 0; piece < pieces; piece++) {
    if (piece > 0) {
      collectYoung()
      await nextTurn()
    }
    const received = receiveMessageOnPort(routesIn)
    if (received === undefined) throw new Error('the config loader sent fewer routes than it loaded')
    for (const route of received.message as RoutesPiece) {
      if (typeof route !== 'number') routes.push(freezeConfig(route))
      else if (served[route] !== undefined) routes.push(served[route])
      else throw new Error('the config loader named a route that is not in service')
    }
  }
  return freezeConfig({ ...config, routes })
}
