/**
 * A reload's load hands a route equal to one in service back as that object (check/load-off-thread.ts), so that its
 * compiled rule is kept (rules/compile.ts). Equal means equal after loading: the same text and the same `${NAME}`
 * values; anything else is a new object. (From the TypeScript sources the load runs on this thread, as
 * `ConfigLoader.load` does without a compiled worker; the worker's path is test/e2e/lifecycle.test.ts.)
 */
import { mkdtempSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { stringify } from 'yaml'
import { describe, expect, it } from 'vitest'
import { loadConfigFile } from '../../src/check/load.js'
import { ConfigLoader, placesIn, routeKeys, type Reloaded } from '../../src/check/load-off-thread.js'

const routes = (changed: Record<string, unknown> = {}) => [
  { id: 'a', path: '/a/**', upstream: 'main' },
  { id: 'b', path: '/b/${B_PATH}', upstream: 'main', scopes: { all: ['x'] } },
  { id: 'c', path: '/c/**', upstream: 'main', ...changed },
]
/** A load that found a changed file: its config and keys. */
function changed(reloaded: Reloaded) {
  if (reloaded.config === undefined) throw new Error('the file was not loaded')
  return reloaded
}
const text = (list: unknown[]) => stringify({ upstreams: { main: { url: 'http://127.0.0.1:9' } }, routes: list })

describe('a reload hands unchanged routes back as the objects in service', () => {
  it('equal routes are the served objects, a changed one and one whose ${NAME} changed are new', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-reload-'))
    const file = path.join(dir, 'portcullis.yaml')
    const env = { B_PATH: 'one' }
    writeFileSync(file, text(routes()))
    const served = loadConfigFile(file, env)
    const keys = routeKeys(served.routes)
    const loader = new ConfigLoader()

    // Route c changed, moved first; a and b as they were.
    const [a, b, c] = routes({ scopes: { all: ['y'] } })
    writeFileSync(file, text([c, a, b]))
    const first = changed(await loader.load(file, env, { routes: { configs: served.routes, keys } }))
    expect(first.config.routes.map((route) => route.id)).toEqual(['c', 'a', 'b'])
    expect(first.config.routes[1]).toBe(served.routes[0])
    expect(first.config.routes[2]).toBe(served.routes[1])
    expect(first.config.routes[0]).not.toBe(served.routes[2])
    expect(first.config.routes[0]!.scopes).toEqual({ all: ['y'] })
    expect(Object.isFrozen(first.config.routes[0])).toBe(true)

    // The same text with another value of B_PATH: route b is another route.
    const second = changed(await loader.load(file, { B_PATH: 'two' }, { routes: { configs: first.config.routes, keys: first.keys } }))
    expect(second.config.routes[2]!.path).toBe('/b/two')
    expect(second.config.routes[2]).not.toBe(first.config.routes[2])
    expect(second.config.routes[0]).toBe(first.config.routes[0])
    expect(second.config.routes[1]).toBe(first.config.routes[1])

    // Nothing in service to compare with: every route is new.
    const third = changed(await loader.load(file, env))
    for (const [i, route] of third.config.routes.entries()) expect(route).not.toBe(first.config.routes[i])
    await loader.close()
  })

  it('keys: equal routes have equal keys, any difference another; places name the first equal route in service, or -1', () => {
    const one = { id: 'a', path: '/a/**', upstream: 'main' }
    const keys = routeKeys([one, { ...one, id: 'b' }, { ...one, methods: ['GET'] }, { ...one }] as never)
    const key = (i: number) => Buffer.from(keys.subarray(i * 32, (i + 1) * 32)).toString('hex')
    expect(key(0)).toBe(key(3))
    expect(new Set([key(0), key(1), key(2)]).size).toBe(3)
    const served = routeKeys([{ ...one, id: 'b' }, one] as never)
    expect([...placesIn(keys, served)]).toEqual([1, 0, -1, 1])
    expect([...placesIn(keys, undefined)]).toEqual([-1, -1, -1, -1])
  })

  it('numbers JSON would write alike (NaN, ±Infinity as null; -0 as 0) give other keys: YAML\'s .nan and .inf load as such', () => {
    const condition = (equals: unknown) => ({ id: 'a', path: '/a/**', upstream: 'main', claims: { all: [{ claim: 'tenant', equals }] } })
    const keys = routeKeys([NaN, Infinity, -Infinity, 0, -0, 'null'].map(condition) as never)
    const distinct = new Set(Array.from({ length: 6 }, (_, i) => Buffer.from(keys.subarray(i * 32, (i + 1) * 32)).toString('hex')))
    expect(distinct.size).toBe(6)
  })
})
