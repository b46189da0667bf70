/**
 * Issue 24 item 2: the request line written without pino's per-line work (src/server/log-output.ts). It must
 * be the line pino would write, held lines must keep their place among pino's own, and none may be lost
 * at exit; a path or request id made to break the JSON must not.
 */
import { spawn, spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import path from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import pino from 'pino'
import { HELD_BYTES, LogOutput, RequestLog, type RequestLine } from '../../src/server/log-output.js'
import { lineCollector } from '../support/logs.js'
import { rawRequest, startGateway, testConfig, type RunningGateway } from '../support/gateway.js'
import { startRecordingUpstream, type RecordingUpstream } from '../support/upstream.js'
import { startTestIssuer, type TestIssuer } from '../support/issuer.js'

/** Every write the output received, as it came. */
function recordingOutput(): { writes: string[]; stream: pino.DestinationStream } {
  const writes: string[] = []
  return { writes, stream: { write: (text: string) => { writes.push(text) } } }
}

const endOfTurn = () => new Promise<void>((resolve) => setImmediate(resolve))
const withoutTime = (line: string) => line.replace(/"time":\d+/, '"time":0')

const LINE: RequestLine = { reqId: 'a1b2', route: 'orders', method: 'GET', path: '/orders/1', status: 200, decision: 'forwarded', ms: 1.25 }

/** `LINE` with `changes`, its fields in the order request-record.ts makes them (pino writes an object's in its own order). */
function line(changes: Partial<RequestLine>): RequestLine {
  const all = { ...LINE, ...changes }
  return { reqId: all.reqId, route: all.route, method: all.method, path: all.path, status: all.status, decision: all.decision,
    error: all.error, reason: all.reason, ms: all.ms, trace_id: all.trace_id, span_id: all.span_id }
}

describe('the request line', () => {
  const cases: Array<[string, RequestLine, 'request' | 'request denied']> = [
    ['forwarded', LINE, 'request'],
    ['no route, no method', line({ route: undefined, method: undefined, status: 404, decision: 'rejected', error: 'not_found', reason: 'no route' }), 'request denied'],
    ['a reason with quotes, backslashes, control characters and non-ASCII', line({ status: 401, decision: 'denied', error: 'invalid_token',
      reason: 'kid "x\\y"\n\t\u0000\u001f é 漢 \ud83d\ude00 \ud800 end' }), 'request denied'],
    ['a path a client wrote to break the line', line({ path: '/a"b\\c/é/\u007f/"}\n{"level":60' }), 'request'],
    ['traced', line({ trace_id: '0af7651916cd43dd8448eb211c80319c', span_id: 'b7ad6b7169203331' }), 'request'],
    ['a time that is no number', line({ ms: Number.NaN }), 'request'],
    ['times of every shape a request takes', line({ ms: 0 }), 'request'],
    ['a whole number of milliseconds', line({ ms: 120 }), 'request'],
    ['tenths', line({ ms: 3.1 }), 'request'],
    ['a time made to test the rounding', line({ ms: 1.005 }), 'request'],
    ['a very long time', line({ ms: 98_765_432.1 }), 'request'],
    ['a time that is no hundredth', line({ ms: 1e-7 }), 'request'],
    ['a huge time', line({ ms: 1e21 }), 'request'],
    ['a time past the digit-by-digit range', line({ ms: 1_234_567_890.12 }), 'request'],
    ['a negative time', line({ ms: -1.5 }), 'request'],
    ['a time of exactly one hundredth and one half', line({ ms: 0.01 }), 'request'],
    ['an odd status', line({ status: 999 }), 'request'],
    ['a request id of every character it may have', line({ reqId: 'Az09._:-' }), 'request'],
    ['a route id and a code at the edges of plain ASCII', line({ route: ' !#[]~', error: '\u007f\u0020' }), 'request denied'],
  ]
  it.each(cases)('%s: the same text pino writes for the same fields', (_name, entry, msg) => {
    const fromPino = recordingOutput()
    const logger = pino({ level: 'info' }, fromPino.stream)
    logger.info(Object.fromEntries(Object.entries(entry).filter(([, value]) => value !== undefined)), msg)
    const ours = recordingOutput()
    const output = new LogOutput(ours.stream)
    new RequestLog(logger, output).write(entry, msg)
    output.flush()
    expect(ours.writes).toHaveLength(1)
    expect(withoutTime(ours.writes[0]!)).toBe(withoutTime(fromPino.writes[0]!))
    expect(ours.writes[0]!.endsWith('}\n')).toBe(true)
    expect(ours.writes[0]!.split('\n')).toHaveLength(2)
  })

  it("carries the logger's own bindings (pid, hostname), as pino's lines do", () => {
    const ours = recordingOutput()
    const output = new LogOutput(ours.stream)
    new RequestLog(pino({ level: 'info' }, output), output).write(LINE, 'request')
    output.flush()
    expect(JSON.parse(ours.writes[0]!)).toMatchObject({ level: 30, pid: process.pid, hostname: expect.any(String), reqId: 'a1b2', msg: 'request' })
  })
})

describe('the log output', () => {
  it('holds the request lines of a turn and writes them in one write at its end', async () => {
    const out = recordingOutput()
    const output = new LogOutput(out.stream)
    const requests = new RequestLog(pino({}, output), output)
    for (let i = 0; i < 5; i++) requests.write({ ...LINE, reqId: `r${i}` }, 'request')
    expect(out.writes).toEqual([])
    await endOfTurn()
    expect(out.writes).toHaveLength(1)
    expect(out.writes[0]!.trimEnd().split('\n').map((line) => (JSON.parse(line) as { reqId: string }).reqId)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4'])
  })

  it("keeps the order of the lines: pino's own lines come after the request lines made before them", async () => {
    const out = recordingOutput()
    const output = new LogOutput(out.stream)
    const logger = pino({}, output)
    const requests = new RequestLog(logger, output)
    requests.write({ ...LINE, reqId: 'first' }, 'request')
    logger.warn('between')
    requests.write({ ...LINE, reqId: 'last' }, 'request')
    await endOfTurn()
    const order = out.writes.join('').trimEnd().split('\n').map((line) => JSON.parse(line) as { reqId?: string; msg: string })
      .map((entry) => entry.reqId ?? entry.msg)
    expect(order).toEqual(['first', 'between', 'last'])
  })

  it('holds at most 64 KiB: a line that would not fit writes out what is held first, never half a line', () => {
    const out = recordingOutput()
    const output = new LogOutput(out.stream)
    const requests = new RequestLog(pino({}, output), output)
    const long = { ...LINE, path: `/${'x'.repeat(500)}` }
    let lines = 0
    while (out.writes.length === 0) {
      requests.write(long, 'request')
      lines++
      expect(lines).toBeLessThan(200)
    }
    const written = out.writes[0]!
    // Held until the next line might not have fitted: its bound is 6 bytes per character of each string field.
    expect(Buffer.byteLength(written)).toBeLessThanOrEqual(HELD_BYTES)
    expect(Buffer.byteLength(written)).toBeGreaterThan(HELD_BYTES - 4 * 1024)
    expect(written.endsWith('}\n')).toBe(true)
    expect(written.trimEnd().split('\n')).toHaveLength(lines - 1)
    output.flush()
    expect(out.writes).toHaveLength(2)
    expect(JSON.parse(out.writes[1]!)).toMatchObject({ path: long.path })
  })

  it('a line longer than all that may be held (a reason of 100 000 characters, escaped six-fold) is written whole, after what is held', () => {
    const out = recordingOutput()
    const output = new LogOutput(out.stream)
    const requests = new RequestLog(pino({}, output), output)
    requests.write({ ...LINE, reqId: 'before' }, 'request')
    const reason = '\u0001é"'.repeat(33_334)
    requests.write(line({ reqId: 'long', status: 401, decision: 'denied', error: 'invalid_token', reason }), 'request denied')
    requests.write({ ...LINE, reqId: 'after' }, 'request')
    output.flush()
    expect(out.writes).toHaveLength(3)
    const entries = out.writes.map((text) => JSON.parse(text) as { reqId: string; reason?: string })
    expect(entries.map((entry) => entry.reqId)).toEqual(['before', 'long', 'after'])
    expect(entries[1]!.reason).toBe(reason)
  })

  it('makes a request id of its own, a version 4 UUID, distinct for every line, when the request brought none', () => {
    const out = recordingOutput()
    const output = new LogOutput(out.stream)
    const requests = new RequestLog(pino({}, output), output)
    // More than one pool of random bytes (256 ids) is used.
    for (let i = 0; i < 1000; i++) requests.write(line({ reqId: undefined }), 'request')
    output.flush()
    const ids = out.writes.join('').trimEnd().split('\n').map((text) => (JSON.parse(text) as { reqId: string }).reqId)
    expect(ids).toHaveLength(1000)
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(new Set(ids).size).toBe(1000)
  })

  it('writes what it holds when the process exits in the same turn', () => {
    const module = path.resolve('dist/server/log-output.js')
    if (!existsSync(module)) throw new Error('dist/ is missing: run `npm run build` (npm test does it in pretest)')
    const script = `
      import pino from 'pino'
      import { LogOutput, RequestLog } from ${JSON.stringify(module)}
      const output = new LogOutput(pino.destination({ dest: 1, sync: true }), true)
      const requests = new RequestLog(pino({}, output), output)
      for (let i = 0; i < 3; i++) requests.write({ reqId: 'exit-' + i, route: 'r', method: 'GET', path: '/', status: 200, decision: 'forwarded', ms: 1 }, 'request')
      process.exit(0)`
    const run = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', cwd: process.cwd() })
    expect(run.status, run.stderr).toBe(0)
    expect(run.stdout.trimEnd().split('\n').map((line) => (JSON.parse(line) as { reqId: string }).reqId)).toEqual(['exit-0', 'exit-1', 'exit-2'])
  })
})

describe('the log output on a file descriptor (the process\'s stdout)', () => {
  /** Runs `body` in a child process with LogOutput, RequestLog and pino in scope; its stdout as written. */
  async function child(body: string, { readAfterMs = 0 } = {}): Promise<{ status: number | null; stdout: string; stderr: string }> {
    const module = path.resolve('dist/server/log-output.js')
    if (!existsSync(module)) throw new Error('dist/ is missing: run `npm run build` (npm test does it in pretest)')
    const script = `
      import fs from 'node:fs'
      import pino from 'pino'
      import { LogOutput, RequestLog } from ${JSON.stringify(module)}
      ${body}`
    const proc = spawn(process.execPath, ['--input-type=module', '-e', script], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'pipe'] })
    // Not read at first: the pipe fills and the writer meets EAGAIN.
    proc.stdout.pause()
    const chunks: Buffer[] = []
    let stderr = ''
    proc.stderr.on('data', (chunk: Buffer) => { stderr += String(chunk) })
    proc.stdout.on('data', (chunk: Buffer) => chunks.push(chunk))
    setTimeout(() => proc.stdout.resume(), readAfterMs)
    const status = await new Promise<number | null>((resolve) => proc.on('close', resolve))
    return { status, stdout: Buffer.concat(chunks).toString('utf8'), stderr }
  }

  it('writes the held bytes to the descriptor whole and in order, with pino\'s own lines in their places, and at exit', async () => {
    const run = await child(`
      const output = new LogOutput(pino.destination({ dest: 1, sync: true }), true, 1)
      const logger = pino({}, output)
      const requests = new RequestLog(logger, output)
      requests.write({ reqId: 'r-1', route: 'r', method: 'GET', path: '/é/漢', status: 200, decision: 'forwarded', ms: 1 }, 'request')
      logger.warn('between')
      requests.write({ reqId: 'r-2', route: 'r', method: 'GET', path: '/', status: 200, decision: 'forwarded', ms: 1 }, 'request')
      setImmediate(() => {
        requests.write({ reqId: 'r-3', route: 'r', method: 'GET', path: '/', status: 200, decision: 'forwarded', ms: 1 }, 'request')
        process.exit(0)
      })`)
    expect(run.status, run.stderr).toBe(0)
    const entries = run.stdout.trimEnd().split('\n').map((line) => JSON.parse(line) as { reqId?: string; msg: string; path?: string })
    expect(entries.map((entry) => entry.reqId ?? entry.msg)).toEqual(['r-1', 'between', 'r-2', 'r-3'])
    expect(entries[0]!.path).toBe('/é/漢')
  })

  it('waits for a full non-blocking pipe (EAGAIN) and loses no line: 8 MB of request lines against a reader that starts late', async () => {
    const run = await child(`
      // Node's own process.stdout makes the descriptor non-blocking: a full pipe answers EAGAIN, not a wait.
      void process.stdout
      const fd = 1
      let eagain = 0
      const writeSync = fs.writeSync
      fs.writeSync = (...args) => { try { return writeSync(...args) } catch (error) { if (error.code === 'EAGAIN') eagain++; throw error } }
      ;(await import('node:module')).syncBuiltinESMExports()
      process.on('exit', () => process.stderr.write('EAGAIN ' + eagain))
      const output = new LogOutput(pino.destination({ dest: fd, sync: true }), true, fd)
      const logger = pino({}, output)
      const requests = new RequestLog(logger, output)
      const path = '/' + 'x'.repeat(400)
      let n = 0
      const turn = () => {
        for (let i = 0; i < 100; i++) requests.write({ reqId: 'r-' + n++, route: 'r', method: 'GET', path, status: 200, decision: 'forwarded', ms: 1 }, 'request')
        if (n % 5000 === 0) logger.warn('mark ' + n)
        if (n < 16000) setImmediate(turn)
      }
      turn()`, { readAfterMs: 500 })
    expect(run.status, run.stderr).toBe(0)
    // The pipe did fill (the test proves the wait, not only the write).
    expect(Number(/EAGAIN (\d+)/.exec(run.stderr)?.[1])).toBeGreaterThan(0)
    expect(run.stdout.length).toBeGreaterThan(8_000_000)
    const entries = run.stdout.trimEnd().split('\n').map((line) => JSON.parse(line) as { reqId?: string; msg: string })
    const expected: string[] = []
    for (let n = 0; n < 16000; n++) {
      expected.push(`r-${n}`)
      if ((n + 1) % 5000 === 0) expected.push(`mark ${n + 1}`)
    }
    expect(entries.map((entry) => entry.reqId ?? entry.msg)).toEqual(expected)
  })
})

describe('request lines through the gateway', () => {
  let upstream: RecordingUpstream
  let issuer: TestIssuer
  let gateway: RunningGateway

  beforeAll(async () => {
    upstream = await startRecordingUpstream()
    issuer = await startTestIssuer()
    gateway = await startGateway({ ...testConfig({ upstream, issuer, routes: [{ id: 'open', path: '/**', upstream: 'main', auth: 'none' }] }),
      log: { level: 'info' } })
  })
  afterAll(async () => {
    await gateway.close()
    await upstream.close()
    await issuer.close()
  })

  /** The parsed request lines logged so far (after the turn that wrote them). */
  const requestLines = async (msg = 'request') => {
    await endOfTurn()
    return gateway.logs.map((text) => JSON.parse(text) as Record<string, unknown>).filter((entry) => entry.msg === msg)
  }

  it('a path with quotes and backslashes (refused, 400), and a request id that tries the same, stay inside their fields', async () => {
    gateway.logs.length = 0
    const before = upstream.requests.length
    const target = '/a"b\\c/"}{"level":60'
    const res = await rawRequest(gateway.port, `GET ${target}?token=secret HTTP/1.1\r\nHost: x\r\nX-Request-Id: id"},"level":60\r\nConnection: close\r\n\r\n`)
    expect(res.status).toBe(400)
    expect(upstream.requests).toHaveLength(before)
    const lines = await requestLines('request denied')
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ level: 30, path: target, method: 'GET', status: 400, error: 'invalid_request' })
    // Not a safe token: replaced by a UUID of our own.
    expect(lines[0]!.reqId).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
    expect(gateway.logs.join('')).not.toContain('secret')
  })

  it('a forwarded path with every character a path may carry raw is logged as sent', async () => {
    gateway.logs.length = 0
    const target = "/a/b=c/!$&'()*+,:@~-._/%22%7B"
    const res = await rawRequest(gateway.port, `GET ${target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)
    expect(res.status).toBe(200)
    expect(upstream.requests.at(-1)!.url).toBe(target)
    const lines = await requestLines()
    expect(lines).toHaveLength(1)
    expect(lines[0]).toMatchObject({ path: target, status: 200, route: 'open', decision: 'forwarded' })
  })

  it("a request's line is the text the gateway's own logger (fastify's, with its redaction and serializers) writes for its fields", async () => {
    gateway.logs.length = 0
    const res = await fetch(`${gateway.url}/same?x=1`, { headers: { 'x-request-id': 'same-as-pino' } })
    expect(res.status).toBe(200)
    await endOfTurn()
    const ours = gateway.logs.find((text) => text.includes('"reqId":"same-as-pino"'))
    expect(ours).toBeDefined()
    const { level: _level, time: _time, pid: _pid, hostname: _hostname, msg, ...fields } = JSON.parse(ours!) as Record<string, unknown>
    gateway.logs.length = 0
    gateway.app.log.info(fields, msg as string)
    await endOfTurn()
    expect(gateway.logs).toHaveLength(1)
    expect(withoutTime(ours!)).toBe(withoutTime(gateway.logs[0]!))
  })

  it('each of many concurrent requests has exactly one line, each line whole', async () => {
    gateway.logs.length = 0
    const ids = Array.from({ length: 200 }, (_, i) => `many-${i}`)
    const answers = await Promise.all(ids.map((id) => fetch(`${gateway.url}/many`, { headers: { 'x-request-id': id } })))
    expect(answers.every((res) => res.status === 200)).toBe(true)
    await Promise.all(answers.map((res) => res.arrayBuffer()))
    const lines = await requestLines()
    expect(lines.map((entry) => entry.reqId).sort()).toEqual([...ids].sort())
  })
})

describe('lineCollector (the tests own reading of log output)', () => {
  it('splits a write of several lines into lines, each with its newline', () => {
    const { lines, stream } = lineCollector()
    stream.write('{"a":1}\n{"b":2}\n')
    stream.write('{"c":3}\n')
    expect(lines).toEqual(['{"a":1}\n', '{"b":2}\n', '{"c":3}\n'])
  })
})
