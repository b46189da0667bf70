import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { onTestFinished } from 'vitest'
import { createMemoryAdapter } from '../src/authserver/storage/memory.js'
import { createSqliteAdapter } from '../src/authserver/storage/sqlite.js'
import { describeStorageContract } from './support/storage-contract.js'

describeStorageContract('memory', createMemoryAdapter)

describeStorageContract('sqlite', (options) => {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-store-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return createSqliteAdapter(path.join(dir, 'portcullis.db'), options)
})
