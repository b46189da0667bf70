/** What only the SQLite adapter promises: a file that survives restarts and kill -9, private, in WAL mode. */
import { spawn } from 'node:child_process'
import { existsSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { pathToFileURL } from 'node:url'
import Database from 'better-sqlite3'
import { describe, expect, it, onTestFinished, vi } from 'vitest'
import { createSqliteAdapter } from '../../../src/authserver/storage/sqlite.js'

const COMPILED = path.resolve('dist/authserver/storage/sqlite.js')
const SOURCE = path.resolve('src/authserver/storage/sqlite.ts')
const LATEST_SCHEMA_VERSION = 1

function tempDir(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-sqlite-'))
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

/** A second, raw connection to the file, to look at what the adapter wrote. */
function raw(file: string, readonly = true): Database.Database {
  const db = new Database(file, { readonly })
  onTestFinished(() => { db.close() })
  return db
}

/** The compiled adapter must match the source (`npm test` builds first). */
function assertBuilt(): void {
  if (!existsSync(COMPILED) || statSync(COMPILED).mtimeMs < statSync(SOURCE).mtimeMs) {
    throw new Error(`${COMPILED} is missing or older than ${SOURCE}: run \`npm run build\` first`)
  }
}

interface Child {
  /** Resolves with the first stdout line. */
  firstLine: Promise<string>
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>
  kill(signal: NodeJS.Signals): void
}

/** Runs an ES module with the real `node`; `{{adapter}}` in the script becomes the compiled adapter's URL. */
function runScript(dir: string, script: string, args: string[]): Child {
  // The child imports the compiled adapter, as production does.
  assertBuilt()
  const file = path.join(dir, `child-${Math.random().toString(36).slice(2)}.mjs`)
  writeFileSync(file, script.replaceAll('{{adapter}}', pathToFileURL(COMPILED).href))
  const child = spawn(process.execPath, [file, ...args], { stdio: ['ignore', 'pipe', 'pipe'] })
  onTestFinished(() => { child.kill('SIGKILL') })
  let stdout = ''
  let stderr = ''
  let resolveLine: (line: string) => void
  const firstLine = new Promise<string>((resolve) => { resolveLine = resolve })
  child.stdout.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk
    if (stdout.includes('\n')) resolveLine(stdout.slice(0, stdout.indexOf('\n')))
  })
  child.stderr.setEncoding('utf8').on('data', (chunk: string) => { stderr += chunk })
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null; stdout: string; stderr: string }>((resolve, reject) => {
    child.on('error', reject)
    child.on('close', (code, signal) => resolve({ code, signal, stdout, stderr }))
  })
  return { firstLine: Promise.race([firstLine, exited.then((r) => { throw new Error(`child exited before writing a line: ${r.stderr}`) })]), exited, kill: (signal) => child.kill(signal) }
}

/** The built adapter, whose commits run on the writer thread (the sources have no compiled worker to start). */
async function builtAdapter(): Promise<typeof createSqliteAdapter> {
  assertBuilt()
  return (await import(pathToFileURL(COMPILED).href) as { createSqliteAdapter: typeof createSqliteAdapter }).createSqliteAdapter
}

describe('sqlite storage adapter', () => {
  it('commits on its writer thread: while another connection holds the write lock, the event loop goes on (timers, reads), and the write settles once the lock is gone', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    const store = (await builtAdapter())(file, { purgeIntervalMs: 0 })
    onTestFinished(() => store.close())
    await store.upsert('grant', 'before', { sub: 'a' }, 60)
    // Another writer (another process of `server.workers`, or `portcullis keys rotate`) in the middle of a transaction.
    const other = raw(file, false)
    other.exec('BEGIN IMMEDIATE')
    let settled = false
    const write = store.upsert('grant', 'during', { sub: 'b' }, 60).then(() => { settled = true })
    // On the event loop, the commit would wait here for the lock (busy_timeout, 5 s) and nothing below would run.
    const ticks = await new Promise<number>((resolve) => {
      let count = 0
      const timer = setInterval(() => { if (++count === 5) { clearInterval(timer); resolve(count) } }, 20)
    })
    expect(ticks).toBe(5)
    expect(await store.find('grant', 'before')).toStrictEqual({ sub: 'a' })
    expect(settled).toBe(false)
    expect(await store.find('grant', 'during')).toBeUndefined()
    other.exec('COMMIT')
    await write
    expect(await store.find('grant', 'during')).toStrictEqual({ sub: 'b' })
  })

  it('fails the writes, and never leaves them waiting, when its writer thread cannot run; the next write starts another', async () => {
    const committed = path.resolve('dist/authserver/storage/sqlite-commit.js')
    assertBuilt()
    const { threadCommit } = await import(pathToFileURL(committed).href) as typeof import('../../../src/authserver/storage/sqlite-commit.js')
    // A directory where the file should be: the writer's own connection cannot open it, and the thread stops.
    const committer = threadCommit(tempDir())
    onTestFinished(() => committer.close())
    const first = [committer.write({ op: 'purge', at: 0 }), committer.write({ op: 'destroy', kind: 'grant', id: 'g' })]
    for (const result of await Promise.allSettled(first)) {
      expect(result).toMatchObject({ status: 'rejected', reason: { message: 'the SQLite writer thread stopped: SQLITE_CANTOPEN', code: 'SQLITE_CANTOPEN' } })
    }
    await expect(committer.write({ op: 'purge', at: 0 })).rejects.toThrow('the SQLite writer thread stopped: SQLITE_CANTOPEN')
    await committer.drain()
  })

  it('refuses writes once closed, and its writer thread is gone', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    const store = (await builtAdapter())(file, { purgeIntervalMs: 0 })
    await store.upsert('grant', 'g', { sub: 'a' }, 60)
    await store.close()
    await expect(store.upsert('grant', 'h', {}, 60)).rejects.toThrow(/closed/)
    // The last connection closed, so the WAL was checkpointed into the file and deleted.
    expect(existsSync(`${file}-wal`)).toBe(false)
    expect(raw(file).prepare('SELECT id FROM artifacts').pluck().all()).toStrictEqual(['g'])
  })

  it('keeps every artifact, consumed marks included, across close and reopen', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    const now = () => 1_000_000
    const first = createSqliteAdapter(file, { now })
    await first.upsert('signing_key', 'kid-1', { kty: 'EC', d: 'private' }, 3600)
    await first.upsert('refresh_token', 'r', { grantId: 'g', scope: 'a b' }, 60)
    await first.upsert('device_code', 'd', { userCode: 'WDJB-MJHT' }, 60)
    await first.consume('refresh_token', 'r')
    await first.close()

    const second = createSqliteAdapter(file, { now })
    onTestFinished(() => second.close())
    expect(await second.list('signing_key')).toStrictEqual([
      { kind: 'signing_key', id: 'kid-1', value: { kty: 'EC', d: 'private' }, expiresAt: 1_000_000 + 3_600_000 },
    ])
    expect(await second.find('refresh_token', 'r')).toStrictEqual({ grantId: 'g', scope: 'a b', consumedAt: 1_000_000 })
    expect(await second.consume('refresh_token', 'r')).toBe(false)
    expect(await second.findByUserCode('WDJB-MJHT')).toStrictEqual({ userCode: 'WDJB-MJHT' })
  })

  it('loses nothing committed when the writing process is killed with SIGKILL', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'portcullis.db')
    const rows = 200
    // Writes `rows` rows one commit each, consumes r0, says "done", then keeps writing until it is killed.
    const child = runScript(dir, `
      import { createSqliteAdapter } from '{{adapter}}'
      const [file, rows] = [process.argv[2], Number(process.argv[3])]
      const store = createSqliteAdapter(file)
      for (let i = 0; i < rows; i++) await store.upsert('refresh_token', 'r' + i, { grantId: 'g', i, note: 'ü🦊' }, 3600)
      await store.consume('refresh_token', 'r0')
      process.stdout.write('done\\n')
      let i = rows
      const more = () => store.upsert('refresh_token', 'r' + i++, { grantId: 'g', i }, 3600).then(() => setImmediate(more))
      more()
    `, [file, String(rows)])
    expect(await child.firstLine).toBe('done')
    child.kill('SIGKILL')
    expect((await child.exited).signal).toBe('SIGKILL')
    // No clean close happened: a closing connection checkpoints and deletes the WAL.
    expect(existsSync(`${file}-wal`)).toBe(true)

    const store = createSqliteAdapter(file)
    onTestFinished(() => store.close())
    for (let i = 0; i < rows; i++) {
      expect(await store.find('refresh_token', `r${i}`)).toMatchObject({ grantId: 'g', i, note: 'ü🦊' })
    }
    expect(await store.find('refresh_token', 'r0')).toHaveProperty('consumedAt')
    expect(await store.consume('refresh_token', 'r0')).toBe(false)
    // Whatever the child was writing when it died is either all there or not there at all.
    const listed = await store.list('refresh_token')
    const { count } = raw(file).prepare<[], { count: number }>('SELECT count(*) AS count FROM artifacts').get()!
    expect(listed).toHaveLength(count)
    expect(count).toBeGreaterThanOrEqual(rows)
  })

  it('gives a code to exactly one of several processes consuming it at once', async () => {
    const dir = tempDir()
    const file = path.join(dir, 'portcullis.db')
    const codes = 50
    const setup = createSqliteAdapter(file)
    for (let i = 0; i < codes; i++) await setup.upsert('authorization_code', `c${i}`, {}, 60)
    await setup.close()
    const children = Array.from({ length: 4 }, () => runScript(dir, `
      import { createSqliteAdapter } from '{{adapter}}'
      const store = createSqliteAdapter(process.argv[2])
      const won = []
      for (let i = 0; i < Number(process.argv[3]); i++) if (await store.consume('authorization_code', 'c' + i)) won.push(i)
      await store.close()
      process.stdout.write(JSON.stringify(won) + '\\n')
    `, [file, String(codes)]))
    const won = (await Promise.all(children.map((child) => child.firstLine))).flatMap((line) => JSON.parse(line) as number[])
    expect(won.sort((a, b) => a - b)).toStrictEqual(Array.from({ length: codes }, (_, i) => i))
  })

  it('group commit: writes asked for in one turn run together on the next, each settles only once committed, and a failing one fails alone', async () => {
    const file = path.join(tempDir(), 'store.db')
    const store = createSqliteAdapter(file, { purgeIntervalMs: 0 })
    onTestFinished(() => store.close())
    const other = raw(file)
    const visible = (id: string) => other.prepare('SELECT 1 FROM artifacts WHERE id = ?').get(id) !== undefined
    const seen: Array<[string, boolean[]]> = []
    const written = (id: string) => store.upsert('grant', id, { sub: id }, 60).then(() => { seen.push([id, ['a', 'b', 'c'].map(visible)]) })
    // An object where a grantId must be text cannot be bound: that statement fails, inside the batch.
    const failing = store.upsert('grant', 'bad', { grantId: {} as unknown as string }, 60)
    const pending = [written('a'), written('b'), failing, written('c')]
    // Nothing is written while the turn that asked goes on.
    expect(['a', 'b', 'c'].map(visible)).toEqual([false, false, false])
    const results = await Promise.allSettled(pending)
    expect(results.map((result) => result.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled'])
    // When the first promise settled, all three rows were committed (visible to another connection): one batch.
    expect(seen).toEqual([['a', [true, true, true]], ['b', [true, true, true]], ['c', [true, true, true]]])
    expect(visible('bad')).toBe(false)
  })

  it('creates the file and its missing directories, readable by its owner only', async () => {
    const file = path.join(tempDir(), 'nested', 'data', 'portcullis.db')
    const store = createSqliteAdapter(file)
    onTestFinished(() => store.close())
    await store.upsert('signing_key', 'k', { d: 'private' }, 60)
    for (const name of [file, `${file}-wal`, `${file}-shm`]) expect(statSync(name).mode & 0o777, name).toBe(0o600)
  })

  it('runs in WAL journal mode', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    const store = createSqliteAdapter(file)
    onTestFinished(() => store.close())
    expect(raw(file).pragma('journal_mode', { simple: true })).toBe('wal')
  })

  it('reports a row whose JSON cannot be read as missing, without throwing or logging it', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    const setup = createSqliteAdapter(file)
    await setup.upsert('access_token', 'bad-jti', { grantId: 'g', secret: 's3cr3t' }, 60)
    await setup.upsert('device_code', 'bad-device', { userCode: 'WDJB-MJHT', secret: 's3cr3t' }, 60)
    await setup.upsert('signing_key', 'bad-kid', { d: 's3cr3t' }, 60)
    await setup.upsert('signing_key', 'good-kid', { d: 'fine' }, 60)
    await setup.close()
    const db = raw(file, false)
    db.prepare("UPDATE artifacts SET value = '{\"secret\":\"s3cr3t\"' WHERE id IN ('bad-jti', 'bad-kid')").run()
    db.prepare("UPDATE artifacts SET value = '[\"s3cr3t\"]' WHERE id = 'bad-device'").run()
    const warnings: string[] = []
    const onWarning = (warning: Error) => warnings.push(`${warning.name} ${warning.message}`)
    process.on('warning', onWarning)
    onTestFinished(() => { process.off('warning', onWarning) })

    const store = createSqliteAdapter(file)
    onTestFinished(() => store.close())
    expect(await store.find('access_token', 'bad-jti')).toBeUndefined()
    expect(await store.findByUserCode('WDJB-MJHT')).toBeUndefined()
    expect((await store.list('signing_key')).map((record) => record.id)).toStrictEqual(['good-kid'])
    // Revocation still deletes it, and reports its id so that the jti can be deny-listed.
    expect(await store.revokeByGrantId('g')).toStrictEqual([{ kind: 'access_token', id: 'bad-jti', value: {}, expiresAt: expect.any(Number) }])

    await vi.waitFor(() => expect(warnings).toHaveLength(1))
    expect(warnings[0]).not.toMatch(/s3cr3t|bad-/)
  })

  it('migrates once: reopening keeps the schema at the latest version and the data', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    for (let open = 0; open < 3; open++) {
      const store = createSqliteAdapter(file)
      await store.upsert('grant', `g${open}`, { open }, 60)
      await store.close()
    }
    const db = raw(file)
    expect(db.pragma('user_version', { simple: true })).toBe(LATEST_SCHEMA_VERSION)
    expect(db.prepare('SELECT count(*) AS count FROM artifacts').pluck().get()).toBe(3)
    expect(db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND name LIKE 'artifacts_%' ORDER BY name").pluck().all())
      .toStrictEqual(['artifacts_expires_at', 'artifacts_grant_id', 'artifacts_user_code'])
  })

  it('refuses a file whose schema is newer than it knows', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    await createSqliteAdapter(file).close()
    const db = new Database(file)
    db.pragma(`user_version = ${LATEST_SCHEMA_VERSION + 1}`)
    db.close()
    expect(() => createSqliteAdapter(file)).toThrow(/schema version 2/)
  })

  it('purges expired rows on its own schedule', async () => {
    const file = path.join(tempDir(), 'portcullis.db')
    let time = 1_000_000
    const store = createSqliteAdapter(file, { now: () => time, purgeIntervalMs: 20 })
    onTestFinished(() => store.close())
    await store.upsert('access_token', 'short', {}, 1)
    await store.upsert('access_token', 'long', {}, 60)
    time += 1_000
    const db = raw(file)
    await vi.waitFor(() => expect(db.prepare('SELECT id FROM artifacts').pluck().all()).toStrictEqual(['long']))
  })

  it('does not keep the process alive with its purge timer', async () => {
    const dir = tempDir()
    const child = runScript(dir, `
      import { createSqliteAdapter } from '{{adapter}}'
      const store = createSqliteAdapter(process.argv[2])
      await store.upsert('grant', 'g', {}, 60)
      process.stdout.write('open\\n')
    `, [path.join(dir, 'portcullis.db')])
    const outcome = await Promise.race([child.exited, new Promise((resolve) => setTimeout(resolve, 5_000, 'still running'))])
    expect(outcome).toMatchObject({ code: 0, stdout: 'open\n' })
  })

  it('rejects a negative purge interval', () => {
    expect(() => createSqliteAdapter(':memory:', { purgeIntervalMs: -1 })).toThrow(RangeError)
  })
})
