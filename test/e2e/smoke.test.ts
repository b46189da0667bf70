import { describe, expect, it } from 'vitest'
import { startRecordingUpstream } from '../support/upstream.js'
import { startTestIssuer } from '../support/issuer.js'
import { startGateway, testConfig } from '../support/gateway.js'

describe('gateway smoke', () => {
  it('forwards a request with a valid token and sets identity headers', async ({ onTestFinished }) => {
    const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
    const gateway = await startGateway(testConfig({ upstream, issuer }))
    onTestFinished(async () => { await gateway.close(); await Promise.all([upstream.close(), issuer.close()]) })
    const res = await fetch(`${gateway.url}/orders/1?a=b`, { headers: { authorization: `Bearer ${await issuer.sign({ scope: 'orders:read' })}` } })
    expect(res.status).toBe(200)
    expect(await res.json()).toMatchObject({ ok: true, url: '/orders/1?a=b' })
    expect(upstream.requests).toHaveLength(1)
    expect(upstream.requests[0]!.headers['x-auth-subject']).toBe('user-1')
    expect(upstream.requests[0]!.headers['x-auth-scopes']).toBe('orders:read')
    expect(res.headers.get('x-upstream-private')).toBeNull()
    expect(res.headers.getSetCookie()).toEqual(['a=1', 'b=2'])
  })
})
