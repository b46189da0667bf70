/**
 * `loadConfig` on a worker thread, for hot reloads: parsing and checking a large file (10,000 routes take most of
 * a second, docs/performance.md) must not hold the event loop, and the requests in flight with it. The worker is
 * started per load and ends with it, so the memory a large parse takes goes with it. The routes come back in
 * pieces, one taken in per event-loop turn (the young generation collected after each, common/young-collection.ts).
 * Run from the TypeScript sources (the test runner), where there is no compiled worker next to this module, it is
 * the same load on this thread.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { MessageChannel, receiveMessageOnPort, Worker, type MessagePort } from 'node:worker_threads'
import type { GatewayConfig, RouteConfig } from '../config/schema.js'
import { nextTurn } from '../common/slices.js'
import { collectYoung } from '../common/young-collection.js'
import { ConfigError, freezeConfig, loadConfig, type ConfigIssue } from './load.js'

const WORKER = new URL('./load-worker.js', import.meta.url)

type Answer = { ok: true; config: GatewayConfig; pieces: number } | { ok: false; fileName?: string; issues?: ConfigIssue[]; message?: string }

export function loadConfigOffThread(fileName: string, text: string, env: NodeJS.ProcessEnv): Promise<GatewayConfig> {
  if (!existsSync(fileURLToPath(WORKER))) return Promise.resolve().then(() => loadConfig(fileName, text, env))
  const { port1: routesIn, port2: routesOut } = new MessageChannel()
  return new Promise<GatewayConfig>((resolve, reject) => {
    const worker = new Worker(WORKER, { workerData: { fileName, text, env: { ...env }, routesPort: routesOut }, transferList: [routesOut] })
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
