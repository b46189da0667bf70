/** A recording upstream, a jose-signed issuer and a gateway between them, started and stopped together. */
import { expect, type TestContext } from 'vitest'
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

/** A gateway in front of a recording upstream, as the token suites use it (`/orders` reaches the upstream). */
export interface Routed {
  readonly gateway: RunningGateway
  readonly upstream: RecordingUpstream
}

export const INVALID_TOKEN_CHALLENGE =
  'Bearer realm="test", error="invalid_token", error_description="the access token is invalid or expired"'

export function callOrders(routed: Routed, token: string): Promise<Response> {
  return fetch(`${routed.gateway.url}/orders`, { headers: { authorization: `Bearer ${token}` } })
}

/** 200, and exactly one more request reached the upstream. */
export async function expectAccepted(routed: Routed, token: string): Promise<void> {
  const before = routed.upstream.requests.length
  const res = await callOrders(routed, token)
  expect(res.status).toBe(200)
  await res.arrayBuffer()
  expect(routed.upstream.requests).toHaveLength(before + 1)
}

/** 401 invalid_token with the Bearer challenge, the upstream untouched, and (if given) `reason` the last one logged. */
export async function expectInvalidToken(routed: Routed, token: string, reason?: string): Promise<void> {
  const before = routed.upstream.requests.length
  const res = await callOrders(routed, token)
  expect(res.status).toBe(401)
  expect(res.headers.get('www-authenticate')).toBe(INVALID_TOKEN_CHALLENGE)
  expect(await res.json()).toEqual({ error: 'invalid_token', error_description: 'the access token is invalid or expired' })
  expect(routed.upstream.requests).toHaveLength(before)
  if (reason !== undefined) expect(deniedReasons(routed.gateway).at(-1)).toBe(reason)
}

/** The precise reasons of the requests the gateway denied, in order (they go to the log, never to clients). */
export function deniedReasons(gateway: RunningGateway): unknown[] {
  return gateway.logs.map((line) => JSON.parse(line) as { msg?: string; reason?: unknown })
    .filter((entry) => entry.msg === 'request denied').map((entry) => entry.reason)
}
