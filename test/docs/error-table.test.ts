/**
 * The error tables of docs/configuration.md ("Error responses") against the error classes.
 *
 * - Every concrete GatewayError subclass exported by src/errors/oauth-errors.ts answers with a `code` and a
 *   `status` that some row of the tables gives, with that status (DpopRefused, whose code and status depend on
 *   its arguments, in each form the gateway throws it).
 * - Every (status, code) a row gives is one some error class answers with: a class of oauth-errors.ts, or a
 *   GatewayError subclass declared elsewhere in src/ with a literal `code` and `status` (found in the source
 *   text, since those modules are not this test's to import).
 *
 * A table is read when it is under the "## Error responses" heading and has a `status` and an `error` column.
 * A status cell gives one or more 3-digit statuses; an error cell one or more backticked codes. Several of
 * each pair up in order (`404 / 405`, `` `not_found` / `method_not_allowed` ``); one status applies to every code.
 */
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import * as errors from '../../src/errors/oauth-errors.js'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const DOC = 'docs/configuration.md'
const SECTION = '## Error responses'

type Constructor = new (...args: never[]) => errors.GatewayError

/**
 * Arguments for classes whose `code` and `status` depend on them: each form src/ throws. Any other class is
 * built with no arguments (its code and status are fields of the class); one that cannot be belongs here.
 */
const FORMS: Readonly<Record<string, ReadonlyArray<readonly unknown[]>>> = {
  DpopRefused: [
    ['dpop_missing', 'a proof is required'],                                   // invalid_dpop_proof, 401
    ['dpop_bound_as_bearer', 'bound token as Bearer', { code: 'invalid_token' }],  // invalid_token, 401
    ['dpop_nonce', 'nonce', { useNonce: true }],                               // use_dpop_nonce, 401
    ['dpop_replay_unavailable', 'replay store down', { status: 503 }],         // temporarily_unavailable, 503
  ],
}

interface Answer { readonly code: string; readonly status: number; readonly by: string }

/** The (code, status) of every concrete GatewayError subclass oauth-errors.ts exports, in every form. */
function classAnswers(): Answer[] {
  const answers: Answer[] = []
  for (const [name, value] of Object.entries(errors)) {
    if (typeof value !== 'function' || value === errors.GatewayError) continue
    if (!(value.prototype instanceof errors.GatewayError)) continue
    const Class = value as unknown as Constructor
    for (const args of FORMS[name] ?? [[]]) {
      let instance: errors.GatewayError
      try {
        instance = new Class(...(args as never[]))
      } catch (error) {
        throw new Error(`${name} cannot be built from ${JSON.stringify(args)}: give it arguments in FORMS`, { cause: error })
      }
      // An abstract class of the hierarchy (no code of its own) is not an error anyone answers with.
      if (instance.code === undefined && instance.status === undefined) continue
      answers.push({ code: instance.code, status: instance.status, by: name })
    }
  }
  return answers
}

/** GatewayError subclasses declared in other files of src/ with literal `code = '…'` and `status = N` fields. */
function otherClassAnswers(): Answer[] {
  const answers: Answer[] = []
  const visit = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const file = path.join(dir, entry.name)
      if (entry.isDirectory()) visit(file)
      else if (entry.name.endsWith('.ts') && !entry.name.endsWith('.test.ts')) {
        const text = readFileSync(file, 'utf8')
        for (const match of text.matchAll(/class (\w+) extends GatewayError \{([\s\S]*?)\n\}/g)) {
          const code = /readonly code = '([a-z_]+)'/.exec(match[2]!)?.[1]
          const status = /readonly status = (\d{3})\b/.exec(match[2]!)?.[1]
          if (code !== undefined && status !== undefined) answers.push({ code, status: Number(status), by: `${match[1]} (${path.relative(ROOT, file)})` })
        }
      }
    }
  }
  visit(path.join(ROOT, 'src'))
  return answers
}

/** The cells of a Markdown table row, split on `|` outside backticks. */
function cells(row: string): string[] {
  const out: string[] = []
  let cell = ''
  let code = false
  for (const char of row.trim().replace(/^\|/, '').replace(/\|$/, '')) {
    if (char === '`') code = !code
    if (char === '|' && !code) { out.push(cell.trim()); cell = ''; continue }
    cell += char
  }
  out.push(cell.trim())
  return out
}

interface Row { readonly line: number; readonly pairs: ReadonlyArray<{ code: string; status: number }>; readonly problem?: string }

/** The rows of the error tables: their (code, status) pairs, or why a row cannot be read. */
function tableRows(markdown: string): Row[] {
  const lines = markdown.split('\n')
  const start = lines.findIndex((line) => line.trim() === SECTION)
  if (start < 0) throw new Error(`${DOC} has no "${SECTION}" section`)
  const rows: Row[] = []
  let columns: { status: number; error: number } | undefined
  for (let i = start + 1; i < lines.length && !/^## /.test(lines[i]!); i++) {
    const line = lines[i]!
    if (!line.trimStart().startsWith('|')) { columns = undefined; continue }
    const row = cells(line)
    if (!lines[i - 1]!.trimStart().startsWith('|')) {  // a header row
      const names = row.map((cell) => cell.replaceAll('`', '').trim().toLowerCase())
      const status = names.indexOf('status')
      const error = names.indexOf('error')
      columns = status >= 0 && error >= 0 ? { status, error } : undefined
      continue
    }
    if (columns === undefined || row.every((cell) => /^:?-+:?$/.test(cell))) continue
    const statuses = [...(row[columns.status] ?? '').matchAll(/\b([1-5]\d\d)\b/g)].map((m) => Number(m[1]))
    const codes = [...(row[columns.error] ?? '').matchAll(/`([a-z_]+)`/g)].map((m) => m[1]!)
    const at = i + 1
    if (statuses.length === 0 || codes.length === 0) rows.push({ line: at, pairs: [], problem: 'no status or no backticked code' })
    else if (statuses.length === codes.length) rows.push({ line: at, pairs: codes.map((code, k) => ({ code, status: statuses[k]! })) })
    else if (statuses.length === 1) rows.push({ line: at, pairs: codes.map((code) => ({ code, status: statuses[0]! })) })
    else if (codes.length === 1) rows.push({ line: at, pairs: statuses.map((status) => ({ code: codes[0]!, status })) })
    else rows.push({ line: at, pairs: [], problem: `${statuses.length} statuses for ${codes.length} codes` })
  }
  return rows
}

describe(`the error tables of ${DOC}`, () => {
  const rows = tableRows(readFileSync(path.join(ROOT, DOC), 'utf8'))
  const documented = rows.flatMap((row) => row.pairs.map((pair) => ({ ...pair, line: row.line })))
  const answers = classAnswers()
  const key = (a: { code: string; status: number }) => `${a.status} ${a.code}`

  it('are found, and every row reads as statuses and codes', () => {
    expect(answers.length).toBeGreaterThan(20)
    // Each form in FORMS must still give its class another (code, status): a changed constructor shows here.
    for (const [name, forms] of Object.entries(FORMS)) {
      const given = new Set(answers.filter((a) => a.by === name).map(key))
      expect(given.size, `${name}: ${forms.length} forms in FORMS, ${given.size} distinct answers (${[...given].join(', ')})`).toBe(forms.length)
    }
    expect(documented.length).toBeGreaterThan(20)
    const unreadable = rows.filter((row) => row.problem !== undefined).map((row) => `line ${row.line}: ${row.problem}`)
    expect(unreadable, `rows of the error tables that cannot be read:\n  ${unreadable.join('\n  ')}`).toEqual([])
  })

  it('give every error class of src/errors/oauth-errors.ts its code, with its status', () => {
    const inDoc = new Set(documented.map(key))
    const missing = answers.filter((answer) => !inDoc.has(key(answer))).map((a) => {
      const elsewhere = documented.filter((d) => d.code === a.code).map((d) => `${d.status} on line ${d.line}`)
      return `${a.by}: ${a.status} ${a.code}${elsewhere.length > 0 ? ` (the doc gives ${a.code} only as ${elsewhere.join(', ')})` : ' (not in the tables)'}`
    })
    expect(missing, `error classes whose code and status no row of ${DOC} gives:\n  ${missing.join('\n  ')}`).toEqual([])
  })

  it('name only codes and statuses some error class answers with', () => {
    const known = new Set([...answers, ...otherClassAnswers()].map(key))
    const extra = documented.filter((d) => !known.has(key(d))).map((d) => `line ${d.line}: ${d.status} ${d.code}`)
    expect(extra, `rows of ${DOC} whose (status, error) no GatewayError class answers with:\n  ${extra.join('\n  ')}`).toEqual([])
  })
})
