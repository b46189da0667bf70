/**
 * No alarm at install: every package `npm ci` installs accepts the Node versions we declare (`engines.node` in
 * package.json), so npm prints no EBADENGINE. Read from package-lock.json, as npm reads it. (cookie 2 wants
 * Node 22: @fastify/cookie is held at 11.1.0 and fastify's light-my-request at 6.6, both on cookie 1.)
 */
import { readFileSync } from 'node:fs'
import semver from 'semver'
import { describe, expect, it } from 'vitest'

const manifest = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { engines: { node: string } }
const lock = JSON.parse(readFileSync(new URL('../../package-lock.json', import.meta.url), 'utf8')) as {
  packages: Record<string, { version?: string; engines?: { node?: string } | string[]; dev?: boolean; optional?: boolean }>
}

describe('engines', () => {
  const declared = Object.entries(lock.packages)
    .filter(([name, entry]) => name !== '' && !Array.isArray(entry.engines) && entry.engines?.node !== undefined)
    .map(([name, entry]) => ({ name: `${name.replace(/^.*node_modules\//, '')}@${entry.version}`, range: (entry.engines as { node: string }).node, dev: entry.dev === true }))

  it('every locked package accepts the Node running the tests (what npm ci checks: no EBADENGINE)', () => {
    expect(declared.filter(({ range }) => !semver.satisfies(process.version, range)).map(({ name, range }) => `${name}: node ${range}`)).toEqual([])
  })

  it('every package the product runs on (not a devDependency) accepts the oldest Node package.json declares', () => {
    const oldest = semver.minVersion(manifest.engines.node)!.version
    expect(declared.filter(({ range, dev }) => !dev && !semver.satisfies(oldest, range)).map(({ name, range }) => `${name}: node ${range}`)).toEqual([])
  })
})
