/**
 * Every Portcullis config this checkout ships (under deploy/, config/ and examples/) passes `portcullis check` as
 * shipped, relative paths and all: a user who copies one starts from a file that loads. The YAML there that is
 * no Portcullis config is named, so that a new file cannot slip past the check unseen.
 */
import { readdirSync, readFileSync } from 'node:fs'
import path from 'node:path'
import { describe, expect, it } from 'vitest'
import { parse } from 'yaml'
import { portcullis } from '../support/cli.js'

/** Not Portcullis configs: what each is instead, checked by its own top-level key. */
const OTHERS: Record<string, string> = { 'deploy/compose.yaml': 'services' }

function yamlFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return yamlFiles(file)
    return /\.ya?ml$/.test(entry.name) ? [file] : []
  })
}

const files = ['deploy', 'config', 'examples'].flatMap(yamlFiles).sort()

describe('the configs this checkout ships', () => {
  it('are found: the demo, the container\'s, the two-instance deployment\'s and the gRPC example\'s', () => {
    expect(files).toEqual(expect.arrayContaining(['config/portcullis.yaml', 'config/docker.yaml', 'deploy/portcullis.yaml', 'examples/grpc/portcullis.yaml']))
  })

  for (const file of files) {
    if (OTHERS[file] !== undefined) {
      it(`${file} is no Portcullis config (it has \`${OTHERS[file]}:\`)`, () => {
        expect(Object.keys(parse(readFileSync(file, 'utf8')) as object)).toContain(OTHERS[file])
      })
      continue
    }
    it(`${file} passes portcullis check as shipped`, async () => {
      const run = await portcullis(['check', '--config', file])
      expect(run.stderr, run.stdout).toBe('')
      expect(run.code, run.stdout).toBe(0)
      expect(run.stdout).toMatch(new RegExp(`^${file.replace(/[.]/g, '\\.')}: OK$`, 'm'))
    })
  }
})
