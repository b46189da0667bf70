/**
 * src/server/stages.ts keeps the proxy's stages twice: as data (PROXY, what the docs and the other modes read) and
 * written out (runProxy, what the hot path runs). They must name the same stages in the same order.
 */
import { readFileSync } from 'node:fs'
import { expect, it } from 'vitest'

const source = readFileSync(new URL('../../src/server/stages.ts', import.meta.url), 'utf8')

it('runProxy calls the stages of PROXY, in PROXY\'s order', () => {
  const list = /const PROXY: readonly Step\[\] = \[([\s\S]*?)\]\n/.exec(source)![1]!
  const listed = [...list.matchAll(/stage: (\w+)/g)].map((found) => found[1])
  const body = source.slice(source.indexOf('export function runProxy('))
  const called = [...body.matchAll(/^\s+(?:pending = )?(?:let pending = )?(\w+)\(ex\)$/gm)].map((found) => found[1])
  expect(listed).toEqual(['normalize', 'match', 'cors', 'admit', 'authenticate', 'bind', 'authorize', 'rateLimit', 'body', 'forward'])
  expect(called).toEqual(listed.filter((stage) => stage !== 'forward'))
  expect(body).toContain('return forward(ex)')
})
