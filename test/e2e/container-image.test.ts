/**
 * Issue 22: the Dockerfile, really built and run. deploy/build-image.sh builds it (docker build, or buildah
 * without a daemon, making the node base image locally when no registry serves it), then deploy/run-image.sh
 * starts the image with its default config and checks it: the HEALTHCHECK and /healthz, the README's token
 * flow, uid 1000, a clean SIGTERM. Needs a Docker daemon, or buildah and root; else reported as skipped, with
 * the reason. .ci/run builds and checks the image in its own step, with its own time bound, and sets
 * PORTCULLIS_IMAGE_STEP so that this suite does not build it a second time.
 */
import { spawn, spawnSync } from 'node:child_process'
import { describe, expect, it } from 'vitest'

const answers = (command: string, args: string[]) => spawnSync(command, args, { stdio: 'ignore', timeout: 30_000 }).status === 0

function skipReason(): string | undefined {
  if (process.env.PORTCULLIS_IMAGE_STEP) return '.ci/run builds and runs the image in its own step'
  if (answers('docker', ['info'])) return undefined
  if (!answers('buildah', ['--version'])) return 'no Docker daemon answers and buildah is not installed'
  if (process.getuid?.() !== 0) return 'buildah without a Docker daemon needs root here'
  if (!answers('podman', ['--version'])) return 'podman, which runs the image, is not installed'
  return undefined
}
const skip = skipReason()
const TAG = 'localhost/portcullis:vitest'

describe.skipIf(skip !== undefined)(`the container image, built and run${skip ? ` (skipped: ${skip})` : ''}`, () => {
  it(`builds from the Dockerfile, passes its HEALTHCHECK, serves the README token flow as uid 1000, exits 0 on SIGTERM${skip ? ` (skipped: ${skip})` : ''}`, { timeout: 1_200_000 }, async ({ onTestFinished }) => {
    onTestFinished(() => {
      for (const engine of ['docker', 'buildah']) spawnSync(engine, ['rmi', TAG], { stdio: 'ignore' })
    })
    // Asynchronously: minutes of building must not block this worker's event loop.
    const run = await new Promise<{ status: number | null; output: string }>((resolve, reject) => {
      const child = spawn('deploy/build-image.sh', [TAG], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 1_150_000 })
      let output = ''
      child.stdout.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
      child.stderr.setEncoding('utf8').on('data', (chunk: string) => { output += chunk })
      child.on('error', reject)
      child.on('close', (status) => resolve({ status, output }))
    })
    const { output } = run
    expect(run.status, output.slice(-6000)).toBe(0)
    for (const check of ['admin /healthz: 200', 'HEALTHCHECK passes', 'x-auth-subject: demo-service', 'as uid 1000 (non-root)', 'SIGTERM: shut down, exit code 0']) {
      expect(output).toContain(check)
    }
    const size = /image \S+ passed \((\d+) MB\)/.exec(output)
    expect(size).not.toBeNull()
    console.log(`container image: ${size![1]} MB`)
  })
})
