/**
 * The configs a loader thread started ahead warms up on (src/check/warm-up.ts) load without a problem: a thread whose
 * warm-up failed would end before its load, and every reload would wait for a thread of its own again. Each has its
 * sections and route keys in another order (more than four shapes at each site).
 */
import { describe, expect, it } from 'vitest'
import { loadConfig } from '../../src/check/load.js'
import { quickYamlValue } from '../../src/check/yaml-quick.js'
import { WARM_UP_VARIANTS, warmUpConfigTexts } from '../../src/check/warm-up.js'

describe('the warm-up config', () => {
  it('loads, every kind of route in it, through the quick parser the reloads use, each in shapes of its own', () => {
    const texts = warmUpConfigTexts()
    expect(texts).toHaveLength(WARM_UP_VARIANTS)
    expect(WARM_UP_VARIANTS).toBeGreaterThan(4)
    const sectionOrders = new Set<string>()
    const routeOrders = new Set<string>()
    for (const text of texts) {
      expect(quickYamlValue(text)).toBeDefined()
      const config = loadConfig('warm-up.yaml', text, {})
      expect(config.routes).toHaveLength(100)
      expect(new Set(config.routes.map((route) => route.path.replace(/svc-\d+/, 'svc-N')))).toEqual(
        new Set(['/svc-N/v1/items', '/svc-N/v1/items/{id}', '/svc-N/v1/*/search', '/svc-N/**']))
      sectionOrders.add(Object.keys(config).join())
      for (const route of config.routes) if (route.id.startsWith('item-')) routeOrders.add(Object.keys(route).join())
    }
    expect(sectionOrders.size).toBe(WARM_UP_VARIANTS)
    expect(routeOrders.size).toBeGreaterThan(4)
  })
})
