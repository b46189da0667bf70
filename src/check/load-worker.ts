/**
 * The body of the worker thread that loads a config off the event loop (load-off-thread.ts): parse, schema and
 * every lint, as `loadConfig`; the result goes back as a plain value, or the ConfigError's issues.
 */
import { parentPort, workerData } from 'node:worker_threads'
import { ConfigError, loadConfig } from './load.js'

const { fileName, text, env } = workerData as { fileName: string; text: string; env: NodeJS.ProcessEnv }
try {
  parentPort!.postMessage({ ok: true, config: loadConfig(fileName, text, env) })
} catch (error) {
  parentPort!.postMessage(error instanceof ConfigError
    ? { ok: false, fileName: error.fileName, issues: error.issues }
    : { ok: false, message: error instanceof Error ? error.message : String(error) })
}
