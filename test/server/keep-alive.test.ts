/**
 * `server.keep_alive_timeout`: an idle HTTP/1.1 keep-alive connection stays open that long (75 s by default, past a
 * load balancer's 60 s, where node's own default is 5 s), then the gateway closes it.
 */
import net from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { startGateway } from '../support/gateway.js'

const config = (server: Record<string, unknown> = {}) => ({
  server,
  upstreams: { echo: { url: 'builtin:echo' } },
  routes: [{ id: 'all', path: '/**', upstream: 'echo', auth: 'none' }],
})

/** A connection that has had one answer and is now idle; `closed` resolves when the gateway closes it. */
async function idleConnection(port: number): Promise<{ socket: net.Socket; closed: Promise<number> }> {
  const socket = net.connect({ port, host: '127.0.0.1' })
  let answered: () => void
  const first = new Promise<void>((resolve) => { answered = resolve })
  let idleSince = 0
  const closed = new Promise<number>((resolve) => socket.on('close', () => resolve(performance.now() - idleSince)))
  socket.setEncoding('latin1').on('data', () => { idleSince = performance.now(); answered() })
  socket.on('connect', () => socket.write('GET /x HTTP/1.1\r\nHost: gw\r\n\r\n'))
  await first
  return { socket, closed }
}

describe('server.keep_alive_timeout', () => {
  it('is 75 s by default on the public listener, not node\'s 5 s', async ({ onTestFinished }) => {
    const gateway = await startGateway(config())
    onTestFinished(() => gateway.close())
    expect(gateway.app.server.keepAliveTimeout).toBe(75_000)
  })

  it('closes an idle connection after it, and not before', async ({ onTestFinished }) => {
    const gateway = await startGateway(config({ keep_alive_timeout: '1s' }))
    onTestFinished(() => gateway.close())
    const { socket, closed } = await idleConnection(gateway.port)
    onTestFinished(() => { socket.destroy() })
    await sleep(500)
    expect(socket.destroyed).toBe(false)
    const idleMs = await closed
    expect(idleMs).toBeGreaterThanOrEqual(900)
  })
})
