/**
 * `loadConfig` on a worker thread, for hot reloads: parsing and checking a large file (10,000 routes take most of
 * a second, docs/performance.md) must not hold the event loop, and the requests in flight with it. The worker is
 * started per load and ends with it. Run from the TypeScript sources (the test runner), where there is no compiled
 * worker next to this module, it is the same load on this thread.
 */
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { Worker } from 'node:worker_threads'
import type { GatewayConfig } from '../config/schema.js'
import { ConfigError, freezeConfig, loadConfig, type ConfigIssue } from './load.js'

const WORKER = new URL('./load-worker.js', import.meta.url)

type Answer = { ok: true; config: GatewayConfig } | { ok: false; fileName?: string; issues?: ConfigIssue[]; message?: string }

export function loadConfigOffThread(fileName: string, text: string, env: NodeJS.ProcessEnv): Promise<GatewayConfig> {
  if (!existsSync(fileURLToPath(WORKER))) return Promise.resolve().then(() => loadConfig(fileName, text, env))
  return new Promise<GatewayConfig>((resolve, reject) => {
    const worker = new Worker(WORKER, { workerData: { fileName, text, env: { ...env } } })
    let answered = false
    worker.once('message', (answer: Answer) => {
      answered = true
      if (answer.ok) resolve(freezeConfig(answer.config))
      else if (answer.issues !== undefined) reject(new ConfigError(answer.fileName ?? fileName, answer.issues))
      else reject(new Error(answer.message ?? 'the config could not be loaded'))
      void worker.terminate()
    })
    worker.once('error', (error) => { answered = true; reject(error) })
    worker.once('exit', (code) => { if (!answered) reject(new Error(`the config loader stopped (exit code ${code})`)) })
  })
}
