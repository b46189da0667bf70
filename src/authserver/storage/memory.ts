/** In-memory adapter, for unit tests only: nothing survives the process. */
import type { ArtifactKind, ArtifactRecord, FoundArtifact, StorageAdapter, StorageOptions, StoredArtifact } from './adapter.js'

interface Row {
  kind: ArtifactKind
  id: string
  value: StoredArtifact
  expiresAt: number
  consumedAt?: number
}

export function createMemoryAdapter(options: StorageOptions = {}): StorageAdapter {
  const now = options.now ?? Date.now
  const rows = new Map<string, Row>()
  const keyOf = (kind: ArtifactKind, id: string) => `${kind}\u0000${id}`
  const live = (row: Row | undefined): row is Row => row !== undefined && row.expiresAt > now()
  const found = (row: Row): FoundArtifact => structuredClone(row.consumedAt === undefined ? row.value : { ...row.value, consumedAt: row.consumedAt })
  const record = (row: Row): ArtifactRecord => ({ kind: row.kind, id: row.id, value: found(row), expiresAt: row.expiresAt })

  return {
    async upsert(kind, id, value, expiresInSeconds) {
      rows.set(keyOf(kind, id), { kind, id, value: structuredClone(value), expiresAt: now() + expiresInSeconds * 1000 })
    },
    async find(kind, id) {
      const row = rows.get(keyOf(kind, id))
      return live(row) ? found(row) : undefined
    },
    async findByUserCode(userCode) {
      for (const row of rows.values()) if (row.kind === 'device_code' && row.value.userCode === userCode && live(row)) return found(row)
      return undefined
    },
    async consume(kind, id) {
      const row = rows.get(keyOf(kind, id))
      if (!live(row) || row.consumedAt !== undefined) return false
      row.consumedAt = now()
      return true
    },
    async consumeAndWrite(kind, id, writes, requires) {
      const row = rows.get(keyOf(kind, id))
      if (!live(row) || row.consumedAt !== undefined) return false
      if (requires && !live(rows.get(keyOf(requires.kind, requires.id)))) return false
      row.consumedAt = now()
      for (const write of writes) {
        rows.set(keyOf(write.kind, write.id), { kind: write.kind, id: write.id, value: structuredClone(write.value), expiresAt: now() + write.expiresInSeconds * 1000 })
      }
      return true
    },
    async destroy(kind, id) {
      rows.delete(keyOf(kind, id))
    },
    async revokeByGrantId(grantId) {
      const deleted: ArtifactRecord[] = []
      for (const [key, row] of rows) {
        if (row.value.grantId === grantId || (row.kind === 'grant' && row.id === grantId)) {
          deleted.push(record(row))
          rows.delete(key)
        }
      }
      return deleted
    },
    async list(kind) {
      return [...rows.values()].filter((row) => row.kind === kind && live(row)).map(record)
    },
    async purgeExpired() {
      let count = 0
      for (const [key, row] of rows) if (row.expiresAt <= now() && rows.delete(key)) count++
      return count
    },
    async ping() {},
    async close() { rows.clear() },
  }
}
