/**
 * The known attacks on HTTP/2 servers, each made against a real gateway speaking h2c (prior knowledge) on
 * 127.0.0.1, with the frames a hostile client sends (test/support/http2-raw.ts) or node's own client where it
 * can say it. Each test asserts what the server does about it, as node 20.20's nghttp2 (1.61) does it, and that
 * a second, well-behaved HTTP/2 client is served meanwhile or right after, by the recording upstream.
 */
import http2 from 'node:http2'
import { describe, expect, it, type TestContext } from 'vitest'
import { startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer } from '../support/issuer.js'
import {
  ErrorCode, Flag, FrameType, RawH2, Setting, continuationFrame, dataFrame, headerBlock, headersFrame, indexed, literal,
  literalIndexed, pingFrame, requestFields, rstStreamFrame, serverSettings, settingsFrame,
} from '../support/http2-raw.js'

const delay = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms))

interface Setup {
  gateway: RunningGateway
  upstream: RecordingUpstream
  /** A token the default route accepts. */
  token: string
  /** A raw HTTP/2 connection to the gateway, destroyed when the test ends. */
  raw(options?: Parameters<typeof RawH2.connect>[1]): Promise<RawH2>
}

/**
 * A gateway with h2c on, `server` merged into its `server` section (`http2` into `server.http2`): `/echo/**` to
 * builtin:echo, everything else to a recording upstream, both requiring a token. When the test ends the gateway
 * must close within 5 s (unless `mayHang`: then it is given 2 s and left).
 */
async function setup(onTestFinished: TestContext['onTestFinished'], options: {
  server?: Record<string, unknown>
  upstreamExtra?: Record<string, unknown>
  mayHang?: boolean
} = {}): Promise<Setup> {
  const [upstream, issuer] = await Promise.all([startRecordingUpstream(), startTestIssuer()])
  const { http2: h2, ...server } = (options.server ?? {}) as { http2?: Record<string, unknown> }
  const config = testConfig({
    upstream, issuer, upstreamExtra: options.upstreamExtra,
    server: { ...server, http2: { cleartext: true, ...h2 } },
    routes: [
      { id: 'echo', path: '/echo/**', upstream: 'echo', auth: 'required' },
      { id: 'all', path: '/**', upstream: 'main', auth: 'required' },
    ],
  })
  ;(config.upstreams as Record<string, unknown>).echo = { url: 'builtin:echo' }
  const gateway = await startGateway(config)
  onTestFinished(async () => {
    const closed = await Promise.race([gateway.close().then(() => true), delay(options.mayHang ? 2000 : 5000).then(() => false)])
    await Promise.all([upstream.close(), issuer.close()])
    if (!closed && !options.mayHang) throw new Error('the gateway did not close within 5 s')
  })
  const token = await issuer.sign({ scope: 'orders:read' })
  return {
    gateway, upstream, token,
    raw: async (rawOptions) => {
      const connection = await RawH2.connect(gateway.port, rawOptions)
      onTestFinished(() => connection.destroy())
      return connection
    },
  }
}

interface Answer {
  /** The response's :status; 0 without one. */
  status: number
  /** The stream or session error's code (e.g. ERR_HTTP2_STREAM_ERROR) and message, when there was one. */
  error?: string
}

/**
 * A GET over a connection of its own from node's HTTP/2 client. With `settled`, only after the server's SETTINGS
 * are acknowledged (our ACK is known processed once a PING sent after it has come back, RFC 9113 §6.7); without,
 * the request goes out with the preface, as node's client sends a first request. Gives up after 8 s.
 */
async function h2Get(url: string, path: string, headers: http2.OutgoingHttpHeaders, settled = false): Promise<Answer> {
  const session = http2.connect(url)
  session.on('error', () => {})
  try {
    if (settled) {
      await new Promise((resolve) => session.once('remoteSettings', resolve))
      await new Promise<void>((resolve, reject) => session.ping((error) => (error ? reject(error) : resolve())))
    }
    return await new Promise<Answer>((resolve) => {
      const timer = setTimeout(() => resolve({ status: 0, error: 'no answer within 8 s' }), 8000)
      const req = session.request({ ':path': path, ...headers })
      let status = 0
      req.on('response', (head) => { status = Number(head[':status']) })
      req.on('error', (error: Error & { code?: string }) => { clearTimeout(timer); resolve({ status, error: `${error.code}: ${error.message}` }) })
      req.on('end', () => { clearTimeout(timer); resolve({ status }) })
      req.resume()
    })
  } finally {
    session.destroy()
  }
}

/** The well-behaved client: a GET with a valid token, which the recording upstream answers 200. */
function secondClient(s: Setup, path = '/second'): Promise<Answer> {
  return h2Get(s.gateway.url, path, { authorization: `Bearer ${s.token}` })
}

/** The paths the upstream received that start with `prefix`. */
const reached = (upstream: RecordingUpstream, prefix: string) => upstream.requests.map((r) => r.url).filter((url) => url.startsWith(prefix))

/** Resolves true when `connection` closes within `ms`. */
const closesWithin = (connection: RawH2, ms: number) => Promise.race([connection.closed.then(() => true), delay(ms).then(() => false)])

describe('HTTP/2 abuse: the server defends itself and keeps serving others', () => {
  it('rapid reset (CVE-2023-44487): 2000 streams each reset at once end the connection with GOAWAY(INTERNAL_ERROR); nothing after it is processed', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { server: { http2: { idle_timeout: '2s' } } })
    const attacker = await s.raw()
    await attacker.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    const streams = 2000
    const frames: Buffer[] = []
    for (let i = 0; i < streams; i++) {
      const id = 1 + 2 * i
      frames.push(headersFrame(id, headerBlock(requestFields(`/attack/${i}`))), rstStreamFrame(id, ErrorCode.CANCEL))
    }
    const [second] = await Promise.all([secondClient(s), attacker.write(Buffer.concat(frames))])
    expect(second).toEqual({ status: 200 })

    // nghttp2's stream reset rate limit (a burst of 1000, then 33 a second) ends the session.
    expect(await attacker.waitFor((f) => f.type === FrameType.GOAWAY, 5000)).toBeDefined()
    const goaway = attacker.goaway()!
    expect(goaway.errorCode).toBe(ErrorCode.INTERNAL_ERROR)
    expect(goaway.lastStreamId).toBeLessThan(2 * streams - 1)
    // A request past the GOAWAY, with a valid token, is not processed (RFC 9113 §6.8): not answered, not forwarded.
    const late = 2 * streams + 1
    await attacker.write(headersFrame(late, headerBlock(requestFields('/attack/late', [['authorization', `Bearer ${s.token}`]]))))
    expect(await attacker.waitFor((f) => f.streamId === late, 500)).toBeUndefined()
    // The server does not close the socket after its GOAWAY; idle_timeout (2 s here) does.
    expect(await closesWithin(attacker, 5000)).toBe(true)
    expect(reached(s.upstream, '/attack')).toEqual([])
    expect(await secondClient(s, '/second/after')).toEqual({ status: 200 })
    expect(reached(s.upstream, '/second')).toEqual(['/second', '/second/after'])
  })

  // node's HTTP/2 response has no `destroyed`: the gateway's "client gone" checks read the stream's
  // (common/http2.ts responseGone), or every reset request would be forwarded and hold one of the upstream's
  // connections for good, waiting for a 'drain' that never comes: past `connections`, 503 for everyone.
  it('rapid reset (CVE-2023-44487) with a valid token: the reset requests are not forwarded and do not hold the upstream\'s connections', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { upstreamExtra: { queue_timeout: '1s' }, mayHang: true })
    const attacker = await s.raw()
    await attacker.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    // 200 streams: under nghttp2's reset rate limit (a burst of 1000), over the upstream's 128 connections.
    const frames: Buffer[] = []
    for (let i = 0; i < 200; i++) {
      const id = 1 + 2 * i
      frames.push(headersFrame(id, headerBlock(requestFields(`/attack/${i}`, [['authorization', `Bearer ${s.token}`]]))), rstStreamFrame(id, ErrorCode.CANCEL))
    }
    await attacker.write(Buffer.concat(frames))
    await delay(1000)
    attacker.destroy()
    const second = await secondClient(s)
    const gatewayCloses = await Promise.race([s.gateway.close().then(() => true), delay(2000).then(() => false)])
    expect({ forwarded: reached(s.upstream, '/attack').length, second, gatewayCloses }).toEqual({ forwarded: 0, second: { status: 200 }, gatewayCloses: true })
  })

  it('CONTINUATION flood (CVE-2024-27316 class; nghttp2 CVE-2024-28182): a header block that never ends is cut off after 8 CONTINUATION frames with GOAWAY(INTERNAL_ERROR)', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished)
    const attacker = await s.raw()
    await attacker.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    await attacker.write(headersFrame(1, headerBlock(requestFields('/attack/continuation', [['authorization', `Bearer ${s.token}`]])), { endHeaders: false }))
    const secondMeanwhile = secondClient(s)
    // Tiny fragments, so that no header list size limit is what stops it: only the count of frames can.
    let sent = 0
    const started = Date.now()
    while (!attacker.isClosed && attacker.goaway() === undefined && sent < 5000 && Date.now() - started < 5000) {
      await attacker.write(continuationFrame(1, literal(`x-${sent}`, 'a')))
      sent++
      await delay(5)
    }
    expect(attacker.goaway()).toEqual({ lastStreamId: 1, errorCode: ErrorCode.INTERNAL_ERROR })
    // nghttp2 1.61 allows 8 CONTINUATION frames after a HEADERS; the 9th ends the session (slack for frames in flight).
    expect(sent).toBeGreaterThanOrEqual(9)
    expect(sent).toBeLessThan(100)
    expect(await closesWithin(attacker, 2000)).toBe(true)
    expect(await secondMeanwhile).toEqual({ status: 200 })
    expect(reached(s.upstream, '/attack')).toEqual([])
    expect(reached(s.upstream, '/second')).toEqual(['/second'])
  })

  it('HPACK bomb: one dynamic-table entry referenced 5000 times (9 KB that decode to 20 MB) gets RST_STREAM(ENHANCE_YOUR_CALM); the connection goes on', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished)
    // The bomb goes out with the preface, as an attacker would send it, before the server's SETTINGS are acknowledged.
    const attacker = await s.raw({ ackSettings: false })
    const block = Buffer.concat([
      headerBlock(requestFields('/attack/bomb', [['authorization', `Bearer ${s.token}`]])),
      literalIndexed('x-bomb', 'b'.repeat(4000)),
      ...Array.from({ length: 5000 }, () => indexed(62)),
    ])
    expect(block.length).toBeLessThan(16_384)
    await attacker.write(headersFrame(1, block))
    const reset = await attacker.waitFor((f) => f.type === FrameType.RST_STREAM, 3000)
    expect(attacker.resets()).toEqual([{ streamId: 1, errorCode: ErrorCode.ENHANCE_YOUR_CALM }])
    expect(reset).toBeDefined()
    // A stream error only (RFC 9113 §5.4.2): the same connection's next request is answered, by the upstream.
    await attacker.write(headersFrame(3, headerBlock(requestFields('/after-bomb', [['authorization', `Bearer ${s.token}`]]))))
    expect(await attacker.waitFor((f) => f.type === FrameType.DATA && f.streamId === 3 && (f.flags & Flag.END_STREAM) !== 0, 3000)).toBeDefined()
    expect(attacker.goaway()).toBeUndefined()
    expect(await secondClient(s)).toEqual({ status: 200 })
    expect(reached(s.upstream, '/attack')).toEqual([])
    expect(s.upstream.requests.map((r) => r.url)).toEqual(['/after-bomb', '/second'])
  })

  for (const [kind, flood] of [
    ['SETTINGS flood (CVE-2019-9515)', settingsFrame([[Setting.INITIAL_WINDOW_SIZE, 65_535]])],
    ['PING flood (CVE-2019-9512)', pingFrame(Buffer.from('floodpng'))],
  ] as const) {
    it(`${kind}: 20000 frames whose acknowledgements are never read end the connection with GOAWAY(INTERNAL_ERROR), far fewer than 1000 acknowledged`, async ({ onTestFinished }) => {
      const s = await setup(onTestFinished)
      const attacker = await s.raw({ read: false, ackSettings: false })
      const secondMeanwhile = secondClient(s)
      const batch = Buffer.concat(Array.from({ length: 1000 }, () => flood))
      for (let i = 0; i < 20 && !attacker.socket.destroyed; i++) await attacker.write(batch)
      expect(await secondMeanwhile).toEqual({ status: 200 })
      // Only now is anything read: what the server queued for us, then its GOAWAY.
      attacker.resume()
      expect(await closesWithin(attacker, 5000)).toBe(true)
      expect(attacker.goaway()).toEqual({ lastStreamId: 0, errorCode: ErrorCode.INTERNAL_ERROR })
      const type = flood.readUInt8(3)
      // nghttp2 ends a session that has 1000 acknowledgements queued unsent (NGHTTP2_ERR_FLOODED).
      expect(attacker.count(type, Flag.ACK)).toBeLessThan(1000)
      expect(await secondClient(s, '/second/after')).toEqual({ status: 200 })
      expect(reached(s.upstream, '/second')).toEqual(['/second', '/second/after'])
    })
  }

  it('zero-window stall: a client that opens no flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0) and never reads is closed after idle_timeout with GOAWAY(NO_ERROR)', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { server: { http2: { idle_timeout: '1s' } } })
    const attacker = await s.raw({ settings: [[Setting.INITIAL_WINDOW_SIZE, 0]] })
    await attacker.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    expect(await attacker.ping()).toBe(true)
    // 32 KB posted to builtin:echo: a response of more than 32 KB, none of which the server may send.
    const body = Buffer.alloc(32_000, 'z')
    const sent = Date.now()
    await attacker.write(Buffer.concat([
      headersFrame(1, headerBlock(requestFields('/echo/stall', [['authorization', `Bearer ${s.token}`], ['content-type', 'text/plain']], 'POST')), { endStream: false }),
      dataFrame(1, body.subarray(0, 16_000)),
      dataFrame(1, body.subarray(16_000), true),
    ]))
    // The response's HEADERS come (they are not flow-controlled, RFC 9113 §6.9), then nothing.
    expect(await attacker.waitFor((f) => f.type === FrameType.HEADERS && f.streamId === 1, 3000)).toBeDefined()
    expect(await secondClient(s)).toEqual({ status: 200 })
    expect(attacker.isClosed).toBe(false)
    expect(await closesWithin(attacker, 5000 - (Date.now() - sent))).toBe(true)
    expect(attacker.count(FrameType.DATA)).toBe(0)
    expect(attacker.goaway()).toEqual({ lastStreamId: 1, errorCode: ErrorCode.NO_ERROR })
    expect(await secondClient(s, '/second/after')).toEqual({ status: 200 })
    expect(reached(s.upstream, '/second')).toEqual(['/second', '/second/after'])
  })

  it('header list size: past server.max_header_size (4kb, advertised as SETTINGS_MAX_HEADER_LIST_SIZE) a request is refused with RST_STREAM(ENHANCE_YOUR_CALM) and never forwarded', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { server: { max_header_size: '4kb' } })
    const attacker = await s.raw()
    await attacker.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    expect(serverSettings(attacker.frames).get(Setting.MAX_HEADER_LIST_SIZE)).toBe(4096)
    // Our acknowledgement processed: the limit is in force (RFC 9113 §6.5.3).
    expect(await attacker.ping()).toBe(true)
    await attacker.write(headersFrame(1, headerBlock(requestFields('/attack/raw', [['authorization', `Bearer ${s.token}`], ['x-big', 'a'.repeat(6000)]]))))
    expect(await attacker.waitFor((f) => f.type === FrameType.RST_STREAM, 3000)).toBeDefined()
    expect(attacker.resets()).toEqual([{ streamId: 1, errorCode: ErrorCode.ENHANCE_YOUR_CALM }])
    // node's client, once the SETTINGS are acknowledged, sees the same as a stream error.
    const big = await h2Get(s.gateway.url, '/attack/node', { authorization: `Bearer ${s.token}`, 'x-big': 'a'.repeat(6000) }, true)
    expect(big).toEqual({ status: 0, error: 'ERR_HTTP2_STREAM_ERROR: Stream closed with error code NGHTTP2_ENHANCE_YOUR_CALM' })
    expect(await secondClient(s)).toEqual({ status: 200 })
    expect(reached(s.upstream, '/attack')).toEqual([])
    expect(reached(s.upstream, '/second')).toEqual(['/second'])
  })

  // A local SETTINGS value binds only once the peer acknowledges it (RFC 9113 §6.5.3), and node checks a received
  // header list against the acknowledged SETTINGS_MAX_HEADER_LIST_SIZE (64 KB before): a request sent with the
  // preface, as node's client sends its first, gets past it. The gateway counts the list itself (http2.ts).
  it('header list size: the first request on a new connection, sent before the SETTINGS are acknowledged, is refused too (431) and never forwarded', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { server: { max_header_size: '4kb' } })
    const big = await h2Get(s.gateway.url, '/attack/first', { authorization: `Bearer ${s.token}`, 'x-big': 'a'.repeat(6000) })
    expect({ status: big.status, forwarded: reached(s.upstream, '/attack') }).toEqual({ status: 431, forwarded: [] })
  })

  it('concurrent streams: max_concurrent_streams 5 is advertised; streams past it are refused with REFUSED_STREAM, or, once the SETTINGS are acknowledged, end the connection', async ({ onTestFinished }) => {
    const s = await setup(onTestFinished, { server: { http2: { max_concurrent_streams: 5 } } })
    const session = http2.connect(s.gateway.url)
    onTestFinished(() => { session.destroy() })
    await new Promise((resolve) => session.once('remoteSettings', resolve))
    expect(session.remoteSettings.maxConcurrentStreams).toBe(5)

    // Eight streams held open (POST, no body yet) before the SETTINGS are acknowledged: the sixth on are refused
    // (RFC 9113 §5.1.2), the five admitted ones go on and are forwarded once their bodies end.
    const early = await s.raw({ ackSettings: false })
    await early.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    expect(serverSettings(early.frames).get(Setting.MAX_CONCURRENT_STREAMS)).toBe(5)
    const open = (connection: RawH2, ids: number[], prefix: string) => connection.write(Buffer.concat(ids.map((id) =>
      headersFrame(id, headerBlock(requestFields(`${prefix}/${id}`, [['authorization', `Bearer ${s.token}`]], 'POST')), { endStream: false }))))
    const ids = [1, 3, 5, 7, 9, 11, 13, 15]
    await open(early, ids, '/early')
    await early.waitFor((f) => f.type === FrameType.RST_STREAM && f.streamId === 15, 3000)
    expect(early.resets()).toEqual([11, 13, 15].map((streamId) => ({ streamId, errorCode: ErrorCode.REFUSED_STREAM })))
    await early.write(Buffer.concat(ids.map((id) => dataFrame(id, Buffer.from('x'), true))))
    await early.waitFor((f) => f.type === FrameType.DATA && f.streamId === 9 && (f.flags & Flag.END_STREAM) !== 0, 3000)
    expect(reached(s.upstream, '/early').sort()).toEqual(['/early/1', '/early/3', '/early/5', '/early/7', '/early/9'])
    expect(early.goaway()).toBeUndefined()

    // Once acknowledged, nghttp2 takes a sixth stream as a connection error (RFC 9113 §5.1.2 asks for a stream
    // error): GOAWAY(INTERNAL_ERROR) naming the fifth, the open ones reset, the connection closed.
    const late = await s.raw()
    await late.waitFor((f) => f.type === FrameType.SETTINGS, 2000)
    expect(await late.ping()).toBe(true)
    await open(late, [1, 3, 5, 7, 9], '/late')
    expect(await late.ping()).toBe(true)
    expect(late.resets()).toEqual([])
    await open(late, [11], '/late')
    expect(await closesWithin(late, 3000)).toBe(true)
    expect(late.goaway()).toEqual({ lastStreamId: 9, errorCode: ErrorCode.INTERNAL_ERROR })
    expect(late.resets().every((reset) => reset.errorCode === ErrorCode.INTERNAL_ERROR && reset.streamId <= 9)).toBe(true)
    expect(reached(s.upstream, '/late')).toEqual([])

    expect(await secondClient(s)).toEqual({ status: 200 })
    expect(reached(s.upstream, '/second')).toEqual(['/second'])
  })
})
