/**
 * Two `portcullis start` processes (the compiled CLI, as users run it) sharing one Redis, on loopback: the
 * same authorization server (issuer = A's URL, one store under one prefix), each with its own public and
 * admin listener. For the multi-instance suite (issue 7).
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { Redis } from 'ioredis'
import { stringify } from 'yaml'
import { passwordGrant, passwordSetup } from './authserver.js'
import { CLI, spawnProcess, waitFor, type RunningProcess } from './cli.js'
import type { RunningGateway } from './gateway.js'
import { deleteKeys } from './redis.js'
import { closedPort } from './upstream.js'

export interface InstancePairOptions {
  /** The Redis both share. */
  redisUrl: string
  /** Key prefix (with a {hash tag}); one per test. */
  prefix: string
  /** Merged over passwordSetup() in `authorization_server` (e.g. `throttling`). */
  authorizationServer?: Record<string, unknown>
  /** Top-level config keys merged over the base config of both (e.g. `issuers`; `server` is merged under each one's `listen`). */
  extra?: Record<string, unknown>
  /** How long both may take to serve (default 20 s). */
  startTimeoutMs?: number
}

export interface InstancePair {
  /**
   * The two public listeners, for postForm, callApi, passwordGrant and refresh. They run in other processes:
   * `url`, `port`, `logs` (stdout lines), `audit` (the audit file's lines) and `close` (SIGKILL) are real;
   * reading `app` throws.
   */
  a: RunningGateway
  b: RunningGateway
  /** Base URLs of the admin listeners (/readyz, /healthz, /metrics). */
  adminA: string
  adminB: string
  processA: RunningProcess
  processB: RunningProcess
  /** A's config file (`portcullis keys rotate --config` it). */
  configA: string
  prefix: string
  /** Kills both processes and deletes their temp dir (leaves Redis alone: for a private Redis about to go). */
  stop(): Promise<void>
  /** stop(), then deletes every Redis key under the prefix. */
  close(): Promise<void>
}

/** The output of both processes, for error messages. */
function outputs(processes: Array<[string, RunningProcess]>): string {
  return processes.map(([name, running]) => {
    const { stdout, stderr } = running.output()
    const status = running.child.exitCode !== null || running.child.signalCode !== null
      ? `exited (${running.child.exitCode ?? running.child.signalCode})` : 'running'
    return `--- instance ${name} (${status}) stderr:\n${stderr || '(empty)'}\n--- instance ${name} stdout (last 4 KiB):\n${stdout.slice(-4096) || '(empty)'}`
  }).join('\n')
}

function remoteGateway(url: string, port: number, running: RunningProcess, auditFile: string): RunningGateway {
  const lines = (text: string) => text.split('\n').filter((line) => line !== '')
  return {
    get app(): never { throw new Error(`the gateway at ${url} runs in another process: there is no app here`) },
    url,
    port,
    decisionUrl: undefined,
    get logs() { return lines(running.output().stdout) },
    get audit() { return existsSync(auditFile) ? lines(readFileSync(auditFile, 'utf8')) : [] },
    close: async () => {
      running.kill()
      await running.exited
    },
  }
}

async function killAll(processes: RunningProcess[]): Promise<void> {
  for (const running of processes) running.kill()
  await Promise.all(processes.map((running) => running.exited.catch(() => undefined)))
}

/**
 * Writes both config files, spawns both processes and waits until they serve: /jwks answers on both, both
 * admin listeners say ready, both are subscribed to the revocation channel, and a password grant on A
 * succeeds. A start that fails (a process exits, or is not ready in time) rejects with both processes'
 * output; one that lost a port race (EADDRINUSE) is retried with new ports.
 */
export async function startInstancePair(options: InstancePairOptions): Promise<InstancePair> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await tryStart(options)
    } catch (error) {
      if (attempt < 3 && error instanceof Error && error.message.includes('EADDRINUSE')) continue
      throw error
    }
  }
}

async function tryStart(options: InstancePairOptions): Promise<InstancePair> {
  const { redisUrl, prefix } = options
  const [portA, portB, adminPortA, adminPortB] = [await closedPort(), await closedPort(), await closedPort(), await closedPort()]
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-pair-'))
  const issuer = `http://127.0.0.1:${portA}`
  const base = {
    upstreams: { echo: { url: 'builtin:echo' } },
    routes: [{ id: 'api', path: '/api/**', upstream: 'echo', auth: 'required' }],
    log: { level: 'warn' },
    ...options.extra,
    authorization_server: {
      enabled: true, issuer, store: { type: 'redis', url: redisUrl, prefix }, ...passwordSetup(options.authorizationServer),
    },
  }
  const spawned: Array<[string, RunningProcess]> = []
  const gateways: RunningGateway[] = []
  for (const [name, port, adminPort] of [['A', portA, adminPortA], ['B', portB, adminPortB]] as const) {
    const file = path.join(dir, `${name}.yaml`)
    const auditFile = path.join(dir, `audit-${name}.log`)
    writeFileSync(file, stringify({
      ...base, server: { ...options.extra?.server as Record<string, unknown> | undefined, listen: `127.0.0.1:${port}` }, admin: { listen: `127.0.0.1:${adminPort}` }, audit: { output: auditFile },
    }))
    const running = spawnProcess(process.execPath, [CLI, 'start', '--config', file], { env: { PATH: process.env.PATH } })
    spawned.push([name, running])
    gateways.push(remoteGateway(`http://127.0.0.1:${port}`, port, running, auditFile))
  }
  const processes = spawned.map(([, running]) => running)
  const stop = async () => {
    await killAll(processes)
    rmSync(dir, { recursive: true, force: true })
  }
  const close = async () => {
    await stop()
    await deleteKeys(redisUrl, prefix)
  }
  const [a, b] = gateways as [RunningGateway, RunningGateway]
  const [adminA, adminB] = [`http://127.0.0.1:${adminPortA}`, `http://127.0.0.1:${adminPortB}`]

  const probe = new Redis(redisUrl, { lazyConnect: true, maxRetriesPerRequest: 1 })
  try {
    const deadline = Date.now() + (options.startTimeoutMs ?? 20_000)
    const ready = async (what: string, check: () => Promise<boolean>) => {
      await Promise.race([
        waitFor(what, check, Math.max(0, deadline - Date.now())),
        // A process that exits while we wait: fail at once, with what it said.
        ...processes.map((running) => running.exited.then(() => { throw new Error('a process exited during start') })),
      ])
    }
    const ok = async (url: string) => (await fetch(url)).status === 200
    await ready('/jwks on A and B', async () => await ok(`${a.url}/jwks`) && await ok(`${b.url}/jwks`))
    await ready('/readyz on A and B', async () => await ok(`${adminA}/readyz`) && await ok(`${adminB}/readyz`))
    await probe.connect()
    const channel = `${prefix}revocations`
    await ready('A and B to subscribe to the revocation channel', async () => {
      const [, count] = await probe.pubsub('NUMSUB', channel) as [string, number]
      return Number(count) >= 2
    })
    await ready('a password grant on A', async () => (await passwordGrant(a, 'orders:read')).status === 200)
  } catch (error) {
    const message = `two portcullis processes did not start (${error instanceof Error ? error.message : String(error)}):\n${outputs(spawned)}`
    await close().catch(() => undefined)
    throw new Error(message, { cause: error })
  } finally {
    probe.disconnect()
  }
  return { a, b, adminA, adminB, processA: processes[0]!, processB: processes[1]!, configA: path.join(dir, 'A.yaml'), prefix, stop, close }
}
