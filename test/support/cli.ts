/** Runs the compiled `portcullis` bin, as users do, with the given stdin and a clean environment. */
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process'
import path from 'node:path'

export const CLI = path.resolve('dist/cli.js')

export interface CliRun {
  code: number | null
  stdout: string
  stderr: string
}

export function portcullis(args: string[], options: { stdin?: string; env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<CliRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { PATH: process.env.PATH, ...options.env },
      stdio: ['pipe', 'pipe', 'pipe'],
      ...(options.cwd ? { cwd: options.cwd } : {}),
    })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, stdout, stderr }))
    child.stdin.end(options.stdin ?? '')
  })
}

/** A long-running process (`portcullis start`): its output so far, and how it ended. */
export interface RunningProcess {
  child: ChildProcess
  output(): { stdout: string; stderr: string }
  /** Resolves when the process has exited and its output is complete. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>
  /** SIGKILL if still running (test cleanup). */
  kill(): void
}

export function spawnProcess(command: string, args: string[], options: SpawnOptions = {}): RunningProcess {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', 'pipe'] })
  let stdout = ''
  let stderr = ''
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => { stdout += chunk })
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal }))
  })
  return {
    child,
    output: () => ({ stdout, stderr }),
    exited,
    kill: () => { if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL') },
  }
}

/** Polls `probe` until it returns true, or fails after `timeoutMs`. */
export async function waitFor(what: string, probe: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise((resolve) => setTimeout(resolve, 100))
  }
}
