import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRequire } from 'node:module'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { Client } from 'undici'
import { enterKnownHeaderNames } from './known-names.js'

/** undici's own table, as undici's request code reads it (the module it requires, not a copy). */
const table = (createRequire(import.meta.url)('undici/lib/core/constants.js') as { headerNameLowerCasedRecord: Record<string, string | undefined> })
  .headerNameLowerCasedRecord

let server: http.Server
let url: string
const received: http.IncomingHttpHeaders[] = []

beforeAll(async () => {
  server = http.createServer((req, res) => { received.push(req.headers); res.end('ok') })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
})
afterAll(async () => {
  await new Promise((resolve) => server.close(resolve))
})

/**
 * One request on a client of its own: in undici 7.30, a request refused for its headers leaves its connection's
 * slot taken, and a one-connection pool then waits for ever (noted in the session note, not ours to fix here).
 */
async function send(headers: Record<string, string> | string[]): Promise<number> {
  const client = new Client(url)
  try {
    const res = await client.request({ path: '/', method: 'GET', headers })
    await res.body.text()
    return res.statusCode
  } finally {
    await client.close()
  }
}

describe('the gateway\'s header names in undici\'s table of known names', () => {
  it('enters lower-case token names mapped to themselves, and requests carrying them arrive intact', async () => {
    expect(table['x-auth-subject']).toBeUndefined()
    expect(enterKnownHeaderNames(['x-auth-subject', 'x-forwarded-port', "x-a!#$%&'*+.^_`|~9"])).toBe(3)
    expect(table['x-auth-subject']).toBe('x-auth-subject')
    expect(table["x-a!#$%&'*+.^_`|~9"]).toBe("x-a!#$%&'*+.^_`|~9")
    received.length = 0
    expect(await send({ 'x-auth-subject': 'alice', 'x-forwarded-port': '8080' })).toBe(200)
    expect(received[0]).toMatchObject({ 'x-auth-subject': 'alice', 'x-forwarded-port': '8080' })
  })

  it('never enters what is not a lower-case token, and undici still refuses those names on a request', async () => {
    const bad = ['X-Auth-Subject', 'x-auth subject', 'x-auth:subject', 'x-auth\r\nx-evil', 'x-auth\nsubject', '', 'x-ünicode', 'x-auth"q', 'x-(a)', 'x/y',
      'x-auth\0']
    expect(enterKnownHeaderNames(bad)).toBe(0)
    for (const name of bad) {
      if (name !== 'X-Auth-Subject') expect(table[name], JSON.stringify(name)).toBeUndefined()
    }
    expect(table['X-Auth-Subject']).toBeUndefined()
    received.length = 0
    for (const name of bad.filter((name) => name !== 'X-Auth-Subject')) {
      await expect(send({ [name]: 'v' }), JSON.stringify(name)).rejects.toThrow(/invalid header key/)
    }
    expect(received).toHaveLength(0)
  })

  it('still has undici check every value of an entered name: CR, LF and NUL are refused before anything is sent', async () => {
    enterKnownHeaderNames(['x-auth-scopes'])
    received.length = 0
    for (const value of ['a\r\nx-evil: 1', 'a\nb', 'a\rb', 'a\0b']) {
      await expect(send({ 'x-auth-scopes': value }), JSON.stringify(value)).rejects.toThrow(/invalid x-auth-scopes header/)
    }
    expect(received).toHaveLength(0)
  })

  it('never replaces one of undici\'s own entries: host, content-length and connection keep their meaning', async () => {
    const before = { host: table.host, 'content-length': table['content-length'], connection: table.connection, Accept: table.Accept }
    expect(enterKnownHeaderNames(['host', 'content-length', 'connection'])).toBe(3)
    expect({ host: table.host, 'content-length': table['content-length'], connection: table.connection, Accept: table.Accept }).toEqual(before)
    // undici still treats them apart: a second Host is refused, a request may not say `connection: upgrade` by itself.
    await expect(send(['host', 'a.example', 'host', 'b.example'])).rejects.toThrow(/duplicate host header/)
    await expect(send({ 'transfer-encoding': 'chunked' })).rejects.toThrow(/invalid transfer-encoding header/)
  })

  it('enters at most 1,000 names over the process\'s life, whatever it is given', () => {
    const many = Array.from({ length: 1_500 }, (_, i) => `x-many-${i}`)
    const present = enterKnownHeaderNames(many)
    expect(present).toBeLessThan(1_000)
    expect(table['x-many-1499']).toBeUndefined()
    expect(Object.keys(table).filter((name) => name.startsWith('x-many-')).length).toBe(present)
    // Names already entered are still reported as present.
    expect(enterKnownHeaderNames(['x-auth-subject', 'x-many-1499'])).toBe(1)
  })
})
