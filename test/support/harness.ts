/** A recording upstream, a jose-signed issuer and a gateway between them, started and stopped together. */
import type { TestContext } from 'vitest'
import { startRecordingUpstream, type RecordingUpstream } from './upstream.js'
import { startTestIssuer, type TestIssuer } from './issuer.js'
import { startGateway, testConfig, type RunningGateway } from './gateway.js'

export interface Harness {
  upstream: RecordingUpstream
  issuer: TestIssuer
  gateway: RunningGateway
}

/** The parts of {@link testConfig} a suite may vary; the upstream and issuer are the harness's own. */
export type HarnessParts = Omit<Parameters<typeof testConfig>[0], 'upstream' | 'issuer'>

export async function bootHarness(parts: HarnessParts = {}): Promise<Harness> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const gateway = await startGateway(testConfig({ upstream, issuer, ...parts }))
  return { upstream, issuer, gateway }
}

export async function shutdownHarness({ upstream, issuer, gateway }: Harness): Promise<void> {
  await gateway.close()
  await Promise.all([upstream.close(), issuer.close()])
}

/** A harness of its own for one test, stopped when the test finishes. */
export async function startHarness(context: TestContext, parts: HarnessParts = {}): Promise<Harness> {
  const harness = await bootHarness(parts)
  context.onTestFinished(() => shutdownHarness(harness))
  return harness
}

/** Forget what the shared harness recorded: every test starts with no request and no log line. */
export function resetHarness(harness: Harness): void {
  harness.upstream.requests.length = 0
  harness.gateway.logs.length = 0
}
