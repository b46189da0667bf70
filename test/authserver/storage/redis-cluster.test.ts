/**
 * The Redis store on a real Redis Cluster (`store.url: redis+cluster://…`), of private redis-server
 * processes this suite creates: the whole storage contract, two instances sharing the cluster (tokens,
 * rotation, revocation broadcast), and a primary's failover. Skipped (with the reason) when redis-server is
 * not installed, except under CI=true, where that is a failure.
 */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest'
import { createRedisAdapter } from '../../../src/authserver/storage/redis.js'
import { describeRedisUrl, isRedisUrl, parseClusterUrl } from '../../../src/redis/url.js'
import { ALICE, APP, callApi, passwordGrant, passwordSetup, postForm, refresh } from '../../support/authserver.js'
import { waitFor } from '../../support/cli.js'
import { startAuthServerGateway, type RunningGateway } from '../../support/gateway.js'
import { redisServerInstalled, startPrivateCluster, type PrivateCluster } from '../../support/redis.js'
import { describeStorageContract } from '../../support/storage-contract.js'

const SKIP = !redisServerInstalled() && process.env.CI !== 'true'

describe('redis+cluster:// URLs', () => {
  it('read the seed nodes (default port 6379, IPv6 in brackets), credentials and TLS; refuse malformed ones and a database number', () => {
    expect(parseClusterUrl('redis+cluster://:s3cr%40t@10.0.0.1:7000,[::1]:7001,node-c')).toEqual({
      nodes: [{ host: '10.0.0.1', port: 7000 }, { host: '::1', port: 7001 }, { host: 'node-c', port: 6379 }], password: 's3cr@t', tls: false,
    })
    expect(parseClusterUrl('rediss+cluster://user:pw@h:1/')).toEqual({ nodes: [{ host: 'h', port: 1 }], username: 'user', password: 'pw', tls: true })
    for (const bad of ['redis+cluster://', 'redis+cluster://h:1/0', 'redis+cluster://h:99999', 'redis+cluster://h:1,,h:2', 'redis+clusters://h:1']) {
      expect(parseClusterUrl(bad), bad).toBeUndefined()
      expect(isRedisUrl(bad), bad).toBe(false)
    }
    expect(describeRedisUrl('redis+cluster://:secret@h1:7000,[::1]:7001')).toBe('cluster at h1:7000,[::1]:7001')
  })
})

describe.skipIf(SKIP)(`the Redis store on a Redis Cluster${SKIP ? ' (redis-server is not installed)' : ''}`, () => {
  let cluster: PrivateCluster
  beforeAll(async () => { cluster = await startPrivateCluster(3) }, 60_000)
  afterAll(() => cluster?.close())

  describeStorageContract('redis cluster', (options) =>
    createRedisAdapter(cluster.url, { ...options, prefix: `{portcullis-contract-${randomUUID()}}:`, purgeIntervalMs: 0 }))

  async function pair(): Promise<[RunningGateway, RunningGateway]> {
    const store = { type: 'redis', url: cluster.url, prefix: `{portcullis-${randomUUID()}}:` }
    const a = await startAuthServerGateway(passwordSetup({ store }))
    onTestFinished(() => a.close())
    const b = await startAuthServerGateway(passwordSetup({ store, issuer: a.issuer }))
    onTestFinished(() => b.close())
    return [a, b]
  }

  it('two instances on the cluster: a token from A passes B, parallel refreshes over both give one success, a revocation on A is refused by B within 1 s', async () => {
    const [a, b] = await pair()
    const first = await passwordGrant(a, 'orders:read')
    expect(first.status).toBe(200)
    const token = first.body.access_token as string
    expect((await callApi(b, token)).status).toBe(200)

    const results = await Promise.all(Array.from({ length: 10 }, (_, i) => refresh(i % 2 === 0 ? a : b, first.body.refresh_token as string)))
    expect(results.filter((res) => res.status === 200)).toHaveLength(1)
    expect(results.filter((res) => res.body.error === 'invalid_grant')).toHaveLength(9)

    expect((await postForm(a, '/revoke', { token, ...APP })).status).toBe(200)
    await waitFor('B to refuse the revoked token', async () => (await callApi(b, token)).status === 401, 1000)
  })

  it('brute-force counters live in the cluster: failures spread over two instances are counted once', async () => {
    const store = { type: 'redis', url: cluster.url, prefix: `{portcullis-${randomUUID()}}:` }
    const throttling = { failures_per_client: 3, failures_per_ip: 1000 }
    const a = await startAuthServerGateway(passwordSetup({ store, throttling }))
    onTestFinished(() => a.close())
    const b = await startAuthServerGateway(passwordSetup({ store, throttling, issuer: a.issuer }))
    onTestFinished(() => b.close())
    for (const gateway of [a, b, a]) {
      expect((await postForm(gateway, '/token', { grant_type: 'password', ...ALICE, password: 'wrong', ...APP })).body.error).toBe('invalid_grant')
    }
    for (const gateway of [a, b]) {
      const locked = await passwordGrant(gateway, 'orders:read')
      expect([locked.status, locked.body.error]).toEqual([429, 'temporarily_unavailable'])
    }
  })

  it('keeps every key of an instance in the one slot of its prefix\'s hash tag', async () => {
    const prefix = `{portcullis-${randomUUID()}}:`
    const gateway = await startAuthServerGateway(passwordSetup({ store: { type: 'redis', url: cluster.url, prefix } }))
    onTestFinished(() => gateway.close())
    expect((await refresh(gateway, (await passwordGrant(gateway, 'orders:read')).body.refresh_token as string)).status).toBe(200)
    // Every key lives on the node that serves the hash tag's slot, and on no other.
    const home = await cluster.primaryFor(prefix)
    const { Redis } = await import('ioredis')
    for (const node of cluster.nodes) {
      const client = new Redis(node.port, '127.0.0.1')
      const keys = await client.keys(`${prefix.replace(/[*?[\]\\]/g, '\\$&')}*`)
      client.disconnect()
      if (node === home) expect(keys.length).toBeGreaterThan(5)
      else expect(keys).toEqual([])
    }
  })
})

describe.skipIf(SKIP)(`a Redis Cluster primary fails over${SKIP ? ' (redis-server is not installed)' : ''}`, () => {
  it('the token endpoint answers 200 or 503 temporarily_unavailable (nothing else) while the slot has no primary, then serves from the promoted replica, with the replicated refresh token', async () => {
    const cluster = await startPrivateCluster(3, 1)
    onTestFinished(() => cluster.close())
    const prefix = `{portcullis-${randomUUID()}}:`
    const gateway = await startAuthServerGateway(passwordSetup({ store: { type: 'redis', url: cluster.url, prefix } }))
    onTestFinished(() => gateway.close())
    const first = await passwordGrant(gateway, 'orders:read')
    expect(first.status).toBe(200)

    const primary = await cluster.primaryFor(prefix)
    // Replication is asynchronous: wait until the replica has every write, as WAIT does.
    const { Redis } = await import('ioredis')
    const client = new Redis(primary.port, '127.0.0.1')
    expect(await client.call('WAIT', '1', '5000')).toBe(1)
    client.disconnect()
    await primary.stop('SIGKILL')

    // ioredis retries a command whose node went away once the slot map moves, so a request may simply take
    // longer; what it must never do is fail otherwise than 503 temporarily_unavailable with Retry-After.
    const outcomes = new Set<string>()
    await waitFor('the replica to be promoted and the token endpoint to serve from it', async () => {
      const res = await passwordGrant(gateway, 'orders:read')
      outcomes.add(res.status === 503 ? `503 ${String(res.body.error)} retry-after ${res.headers.get('retry-after')}` : String(res.status))
      return res.status === 200 && (await cluster.primaryFor(prefix)).port !== primary.port
    }, 20_000)
    expect([...outcomes].filter((outcome) => outcome !== '200' && outcome !== '503 temporarily_unavailable retry-after 1')).toEqual([])
    const rotated = await refresh(gateway, first.body.refresh_token as string)
    expect(rotated.status).toBe(200)
  }, 60_000)
})
