/**
 * Issue 24: every connection of the public and decision listeners gets its kept-Bearer slot as it is accepted,
 * so that its socket keeps one shape for its whole life (src/authn/bearer.ts, src/server/listener.ts). Checked
 * on the socket the requests see, over HTTP and over HTTPS (where it is the TLS socket, not the TCP one).
 */
import type { AddressInfo } from 'node:net'
import type http from 'node:http'
import { Agent, request } from 'undici'
import { describe, expect, it } from 'vitest'
import { hasBearerSlot } from '../../src/authn/bearer.js'
import { createListener } from '../../src/server/listener.js'
import { createTestCa } from '../support/tls.js'

async function firstRequestSees(server: http.Server, url: (port: number) => string, dispatcher?: Agent): Promise<boolean[]> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  try {
    const base = url((server.address() as AddressInfo).port)
    const seen: boolean[] = []
    for (let i = 0; i < 2; i++) {
      const res = await request(`${base}/x`, { dispatcher })
      seen.push(JSON.parse(await res.body.text()) as boolean)
    }
    return seen
  } finally {
    await dispatcher?.close()
    server.closeAllConnections()
    await new Promise((resolve) => server.close(resolve))
  }
}

const answerSlot: http.RequestListener = (req, res) => res.end(JSON.stringify(hasBearerSlot(req.socket)))

describe('each connection has its kept-Bearer slot before its first request', () => {
  it('over HTTP', async () => {
    const server = createListener({ tls: undefined, maxHeaderSize: 16_384 }, answerSlot)
    expect(await firstRequestSees(server, (port) => `http://127.0.0.1:${port}`)).toEqual([true, true])
  })

  it('over HTTPS, on the TLS socket the requests see', async () => {
    const ca = createTestCa()
    try {
      const cert = ca.issue('gateway', ['IP:127.0.0.1'])
      const server = createListener({ tls: { cert_file: cert.certFile, key_file: cert.keyFile }, maxHeaderSize: 16_384 }, answerSlot)
      const agent = new Agent({ connect: { ca: ca.ca } })
      expect(await firstRequestSees(server, (port) => `https://127.0.0.1:${port}`, agent)).toEqual([true, true])
    } finally {
      ca.remove()
    }
  })

  it('is not there on a socket the listeners did not accept', () => {
    expect(hasBearerSlot({})).toBe(false)
  })
})
