/**
 * `portcullis start`: serve the gateway until SIGTERM or SIGINT, reload on SIGHUP. With `server.workers` above 1,
 * this process becomes the primary of the workers (node:cluster); each worker runs this same command.
 */
import { ConfigError, loadConfig, readConfigFile } from './check/load.js'
import type { LoadedConfig } from './server/run.js'
import { oneLine } from './cli-io.js'

/**
 * `server.workers` above 1: this process becomes the primary, which forks the workers (each runs
 * this same command) and supervises them. Resolves to -1 (keep running) once they all listen.
 */
async function startPrimary(configFile: string): Promise<number | LoadedConfig> {
  let loaded: LoadedConfig
  try {
    const text = readConfigFile(configFile)
    // This process serves it when there is one worker: its event loop compiles the validator (LoadOptions).
    loaded = { text, config: loadConfig(configFile, text, process.env, { writtenValidator: false }) }
  } catch (error) {
    console.error(error instanceof ConfigError ? error.message : `start: ${oneLine(error)}`)
    return 1
  }
  const { config } = loaded
  const { runPrimary, workerCount } = await import('./server/cluster.js')
  const count = workerCount(config)
  // One process: it serves what was just loaded, not the file loaded a second time.
  if (count <= 1) return loaded
  let primary
  try {
    primary = await runPrimary(config, count)
    await primary.started
  } catch (error) {
    console.error(`start: ${oneLine(error)}`)
    await primary?.shutdown('failed start')
    process.exit(1)
  }
  const stop = (signal: string) => { void primary.shutdown(signal).then(() => process.exit(0)) }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  return -1
}

/** Serves until SIGTERM or SIGINT; resolves to -1 (keep running) once listening. */
export async function start(configFile: string): Promise<number> {
  const cluster = (await import('node:cluster')).default
  let loaded: LoadedConfig | undefined
  if (cluster.isPrimary) {
    const started = await startPrimary(configFile)
    if (typeof started === 'number') return started
    loaded = started
  }
  // Imported here so `check` and `hash-secret` do not load fastify, undici and jose.
  let running
  try {
    running = cluster.isWorker
      ? await (await import('./server/cluster-worker.js')).runWorker(configFile)
      : await (await import('./server/run.js')).runPortcullis(configFile, { loaded })
  } catch (error) {
    console.error(error instanceof ConfigError ? error.message : `start: ${oneLine(error)}`)
    // A listener opened before the failure (the public one, when the admin port is taken) would keep us alive.
    process.exit(1)
  }
  process.on('SIGHUP', () => { void running.reload('SIGHUP') })
  const stop = (signal: string) => {
    running.shutdown(signal).then(() => process.exit(0), (error: unknown) => {
      console.error(`start: shutdown failed: ${oneLine(error)}`)
      process.exit(1)
    })
  }
  process.once('SIGINT', stop)
  process.once('SIGTERM', stop)
  // A worker whose primary is gone drains and exits rather than serve unsupervised.
  if (cluster.isWorker) process.once('disconnect', () => stop('disconnect'))
  return -1
}
