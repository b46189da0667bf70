/**
 * Issue 19: where a Client ID Metadata Document may be fetched from. The address checks with injected DNS
 * answers, the lookup the connection uses (so what is checked is what is connected to), a real https fetch
 * (test CA) through it, a refused fetch
 * through a resolver that points a public-looking name at loopback, and allowed_hosts patterns.
 */
import { createServer } from 'node:http'
import { createServer as createHttpsServer } from 'node:https'
import type { LookupAddress } from 'node:dns'
import type { AddressInfo } from 'node:net'
import { describe, expect, it } from 'vitest'
import { isPublicAddress, resolvePublic, validatingLookup, type Resolver } from '../../../src/authserver/client-metadata/address.js'
import { ClientMetadataDocuments, hostAllowed, resolveClientMetadataDocuments } from '../../../src/authserver/client-metadata/documents.js'
import { createTestCa } from '../../support/tls.js'

const answers = (...addresses: string[]): Resolver => async () =>
  addresses.map((address) => ({ address, family: address.includes(':') ? 6 as const : 4 as const }))

function lookupWith(resolver: Resolver, allowPrivate: boolean, options: { all?: boolean; family?: number } = { all: true })
  : Promise<LookupAddress[] | string> {
  return new Promise((resolve, reject) => {
    validatingLookup(resolver, allowPrivate)('client.example.com', options as never, (error: NodeJS.ErrnoException | null, address: string | LookupAddress[]) => {
      if (error) reject(error)
      else resolve(address)
    })
  })
}

describe('Client ID Metadata Document addresses', () => {
  it.each([
    '127.0.0.1', '127.255.0.1', '10.1.2.3', '172.16.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '0.0.0.0',
    '224.0.0.1', '255.255.255.255', '::1', '::', '::ffff:127.0.0.1', '::ffff:7f00:1', '0:0:0:0:0:ffff:a00:1', '::ffff:169.254.169.254',
    'fd00::1', 'fc00::1', 'fe80::1', 'ff02::1', '64:ff9b::a00:1', '[::1]', 'not-an-ip',
    // IPv6 forms that carry an IPv4 address, judged by it: IPv4-compatible, SIIT, 6to4, NAT64.
    '::169.254.169.254', '::a9fe:a9fe', '::ffff:0:a9fe:a9fe', '::ffff:0:169.254.169.254', '2002:a9fe:a9fe::1', '2002:7f00:1::',
    '2002:a00:1:1::1', '64:ff9b::127.0.0.1', '64:ff9b::a9fe:a9fe',
    // Not public whatever they carry: site-local, Teredo, local-use NAT64, the 6to4 relay anycast.
    'fec0::1', 'feff::1', '2001::1', '2001:0:4136:e378:8000:63bf:3fff:fdd2', '64:ff9b:1::808:808', '192.88.99.1',
  ])('refuses %s', (address) => {
    expect(isPublicAddress(address)).toBe(false)
  })

  it.each(['93.184.215.14', '8.8.8.8', '172.32.0.1', '2606:4700::1111', '::ffff:8.8.8.8', '2002:808:808::1', '64:ff9b::808:808',
    '::ffff:0:808:808', '2001:4860:4860::8888'])('accepts the public address %s', (address) => {
    expect(isPublicAddress(address)).toBe(true)
  })

  it.each([
    ['127.0.0.1'], ['10.0.0.5'], ['169.254.169.254'], ['::1'], ['::ffff:127.0.0.1'], ['fd00::1'], ['93.184.215.14', '10.0.0.5'],
  ])('refuses a host whose DNS answers include %s (and %s)', async (...addresses) => {
    const resolver = answers(...addresses.filter((item): item is string => typeof item === 'string'))
    await expect(resolvePublic(resolver, 'client.example.com')).rejects.toThrow(/not a public address|non-public/)
    await expect(lookupWith(resolver, false)).rejects.toThrow(/non-public/)
  })

  it('hands the connection exactly the addresses it checked, of the family asked for', async () => {
    const resolver = answers('93.184.215.14', '2606:4700::1111')
    expect(await lookupWith(resolver, false)).toEqual([{ address: '93.184.215.14', family: 4 }, { address: '2606:4700::1111', family: 6 }])
    expect(await lookupWith(resolver, false, { family: 6 })).toBe('2606:4700::1111')
    await expect(lookupWith(answers(), false)).rejects.toThrow('has no address')
  })

  it('lets allow_private_addresses through to loopback and private answers', async () => {
    expect(await lookupWith(answers('127.0.0.1', '10.0.0.5'), true)).toEqual([{ address: '127.0.0.1', family: 4 }, { address: '10.0.0.5', family: 4 }])
  })

  it('never connects when a public-looking name resolves to loopback (no request reaches the server)', async ({ onTestFinished }) => {
    let hits = 0
    const server = createServer((_request, response) => {
      hits += 1
      response.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
    const { port } = server.address() as AddressInfo
    const settings = resolveClientMetadataDocuments({ enabled: true, scopes: ['a'] })!
    // https on a public name: the name resolves (through the injected DNS) to 127.0.0.1, which the connection refuses.
    const documents = new ClientMetadataDocuments(settings, Date.now, { resolver: answers('127.0.0.1') })
    onTestFinished(() => documents.close())
    await expect(documents.client(`https://client.example.com:${port}/client.json`)).rejects.toMatchObject({
      code: 'invalid_client',
      internal: { detail: expect.stringContaining('client.example.com resolves to a non-public address') as unknown },
    })
    expect(hits).toBe(0)
    // Not a URL: not a document client at all.
    expect(await documents.client('spa')).toBeUndefined()
  })

  it('fetches over https from the address its lookup checked, verifying the certificate for the host name', async ({ onTestFinished }) => {
    const ca = createTestCa()
    onTestFinished(() => ca.remove())
    const certificate = ca.issue('client', ['DNS:client.example.test'])
    let clientId = ''
    const server = createHttpsServer({ cert: certificate.cert, key: certificate.key }, (_request, response) => {
      response.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'max-age=60' })
        .end(JSON.stringify({ client_id: clientId, client_name: 'TLS client', redirect_uris: ['https://client.example.test/cb'], scope: 'a b' }))
    })
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    onTestFinished(() => new Promise<void>((resolve) => server.close(() => resolve())))
    clientId = `https://client.example.test:${(server.address() as AddressInfo).port}/client.json`
    // allow_private_addresses: the test server is on loopback, which the injected DNS answers for the name.
    const settings = resolveClientMetadataDocuments({ enabled: true, scopes: ['a', 'c'], allow_private_addresses: true })!
    const documents = new ClientMetadataDocuments(settings, Date.now, { resolver: answers('127.0.0.1'), ca: ca.ca })
    onTestFinished(() => documents.close())
    const client = await documents.client(clientId)
    expect(client).toMatchObject({ clientId, name: 'TLS client', confidential: false, authMethod: 'none', requirePkce: true,
      redirectUris: ['https://client.example.test/cb'], metadataDocument: { host: clientId.slice(8, clientId.indexOf('/', 8)) } })
    // The document's scope, cut down to the configured ones.
    expect([...client!.scopes]).toEqual(['a'])
    expect([...client!.grantTypes]).toEqual(['authorization_code'])
    // Without the test CA the certificate is not trusted.
    const untrusting = new ClientMetadataDocuments(settings, Date.now, { resolver: answers('127.0.0.1') })
    onTestFinished(() => untrusting.close())
    await expect(untrusting.client(clientId)).rejects.toMatchObject({ code: 'invalid_client' })
  })

  it('matches allowed_hosts exactly, and *.example.com one label at a time', () => {
    const patterns = ['clients.example.org', '*.example.com']
    expect(hostAllowed('clients.example.org', patterns)).toBe(true)
    expect(hostAllowed('CLIENTS.example.org', patterns)).toBe(true)
    expect(hostAllowed('app.example.com', patterns)).toBe(true)
    expect(hostAllowed('example.com', patterns)).toBe(false)
    expect(hostAllowed('a.b.example.com', patterns)).toBe(false)
    expect(hostAllowed('app.example.com.evil.net', patterns)).toBe(false)
    expect(hostAllowed('evilexample.com', patterns)).toBe(false)
    expect(hostAllowed('x.clients.example.org', patterns)).toBe(false)
    expect(hostAllowed('anything.net', [])).toBe(true)
  })
})
