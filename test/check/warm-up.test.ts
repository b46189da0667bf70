/**
 * The config a loader thread started ahead warms up on (src/check/warm-up.ts) loads without a problem: a thread whose
 * warm-up failed would end before its load, and every reload would wait for a thread of its own again.
 */
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { quickYamlValue } from '../../src/check/yaml-quick.js'
import { warmUpConfigText } from '../../src/check/warm-up.js'

describe('the warm-up config', () => {
  it('loads, every kind of route in it, through the quick parser the reloads use', () => {
    const text = warmUpConfigText()
    expect(quickYamlValue(text)).toBeDefined()
    const config = loadConfig('warm-up.yaml', text, {})
    expect(config.routes).toHaveLength(400)
    expect(new Set(config.routes.map((route) => route.path.replace(/svc-\d+/, 'svc-N')))).toEqual(
      new Set(['/svc-N/v1/items', '/svc-N/v1/items/{id}', '/svc-N/v1/*/search', '/svc-N/**']))
  })
})
