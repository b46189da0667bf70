import { randomUUID } from 'node:crypto'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import { onTestFinished } from 'vitest'
import { createMemoryAdapter } from '../../../src/authserver/storage/memory.js'
import { createRedisAdapter } from '../../../src/authserver/storage/redis.js'
import { createSqliteAdapter } from '../../../src/authserver/storage/sqlite.js'
import { deleteKeys } from '../../support/redis.js'
import { describeStorageContract, type StorageFactory } from '../../support/storage-contract.js'

describeStorageContract('memory', createMemoryAdapter)

describeStorageContract('sqlite', (options) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-store-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return createSqliteAdapter(path.join(dir, 'portcullis.db'), options)
})

// The build, as `portcullis start` runs it: its commits go through the writer thread (sqlite-commit.ts), which
// the TypeScript sources above have no compiled worker for (`npm test` builds first).
const compiled = await import(pathToFileURL(path.resolve('dist/authserver/storage/sqlite.js')).href) as typeof import('../../../src/authserver/storage/sqlite.js')
describeStorageContract('sqlite, built, writer thread', (options) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-store-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return compiled.createSqliteAdapter(path.join(dir, 'portcullis.db'), options)
})

const REDIS_URL = process.env.REDIS_URL

/** A prefix of its own per test (one hash tag, as in production), its keys deleted afterwards. */
const redisFactory: StorageFactory = async (options) => {
  const prefix = `{portcullis-contract-${randomUUID()}}:`
  onTestFinished(() => deleteKeys(REDIS_URL!, prefix))
  return createRedisAdapter(REDIS_URL!, { ...options, prefix, purgeIntervalMs: 0 })
}

// Without REDIS_URL: reported as skipped, every case by name, rather than silently left out.
describeStorageContract('redis', redisFactory, REDIS_URL === undefined ? 'REDIS_URL is not set' : undefined)
