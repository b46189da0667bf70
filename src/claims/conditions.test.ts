import { describe, expect, it } from 'vitest'
import {compileConditions, unmetCondition, type ClaimConditionsConfig, type ParamPosition, type RequestFacts} from './conditions.js'
import type { Problem } from '../common/problem.js'

const PARAMS: ReadonlyMap<string, ParamPosition> = new Map([['tenant', { index: 1, fromEnd: false }], ['id', { index: 1, fromEnd: true }]])

function compile(config: ClaimConditionsConfig) {
  const problems: Problem[] = []
  const compiled = compileConditions(config, ['routes', 0, 'claims'], PARAMS, problems)
  expect(problems).toEqual([])
  return compiled!
}

/** Whether one condition holds for these claims, on /tenants/<tenant>/orders/<id> with these headers. */
function holds(condition: ClaimConditionsConfig['all'], claims: Record<string, unknown>,
  request: RequestFacts = { headers: {}, segments: ['tenants', 'acme', 'orders', '7'] }): boolean {
  return unmetCondition(compile({ all: condition! }), claims, request) === undefined
}

describe('claim conditions', () => {
  it('equals compares without conversion: 42 is not "42", true is not "true", an array equals nothing', () => {
    expect(holds([{ claim: 'n', equals: 42 }], { n: 42 })).toBe(true)
    expect(holds([{ claim: 'n', equals: 42 }], { n: '42' })).toBe(false)
    expect(holds([{ claim: 'n', equals: '42' }], { n: 42 })).toBe(false)
    expect(holds([{ claim: 'b', equals: true }], { b: 'true' })).toBe(false)
    expect(holds([{ claim: 'b', equals: true }], { b: true })).toBe(true)
    expect(holds([{ claim: 'r', equals: 'admin' }], { r: ['admin'] })).toBe(false)
    expect(holds([{ claim: 's', equals: 'Acme' }], { s: 'acme' })).toBe(false)
  })

  it('contains: an array member, or a whole space-separated word, never a substring', () => {
    expect(holds([{ claim: 'r', contains: 'admin' }], { r: ['reader', 'admin'] })).toBe(true)
    expect(holds([{ claim: 'r', contains: 'admin' }], { r: ['superadmin', 'admins'] })).toBe(false)
    expect(holds([{ claim: 'r', contains: 'admin' }], { r: 'reader admin' })).toBe(true)
    expect(holds([{ claim: 'r', contains: 'admin' }], { r: 'superadmin' })).toBe(false)
    expect(holds([{ claim: 'r', contains: 'admin' }], { r: { admin: true } })).toBe(false)
    expect(holds([{ claim: 'r', contains: 3 }], { r: [1, 2, 3] })).toBe(true)
    expect(holds([{ claim: 'r', contains: 3 }], { r: '1 2 3' })).toBe(false)
  })

  it('one_of: a scalar claim among the values; an array claim is not one of them', () => {
    expect(holds([{ claim: 'tier', one_of: ['gold', 'silver'] }], { tier: 'gold' })).toBe(true)
    expect(holds([{ claim: 'tier', one_of: ['gold', 'silver'] }], { tier: 'bronze' })).toBe(false)
    expect(holds([{ claim: 'tier', one_of: ['gold', 'silver'] }], { tier: ['gold'] })).toBe(false)
  })

  it('present: the claim is there with any value but null', () => {
    for (const value of ['', 0, false, [], {}, 'x']) expect(holds([{ claim: 'c', present: true }], { c: value }), JSON.stringify(value)).toBe(true)
    expect(holds([{ claim: 'c', present: true }], { c: null })).toBe(false)
    expect(holds([{ claim: 'c', present: true }], {})).toBe(false)
    expect(holds([{ claim: 'constructor', present: true }], {})).toBe(false)
  })

  it('a missing claim satisfies nothing, whatever the test', () => {
    for (const condition of [{ equals: 'x' }, { contains: 'x' }, { one_of: ['x'] }, { equals: { param: 'tenant' } }]) {
      expect(holds([{ claim: 'absent', ...condition }], {}), JSON.stringify(condition)).toBe(false)
      expect(holds([{ claim: 'absent', ...condition }], { absent: null }), JSON.stringify(condition)).toBe(false)
    }
  })

  it('a path parameter is compared percent-decoded; a number claim by its decimal form', () => {
    expect(holds([{ claim: 'tenant', equals: { param: 'tenant' } }], { tenant: 'acme' })).toBe(true)
    expect(holds([{ claim: 'tenant', equals: { param: 'tenant' } }], { tenant: 'acme' },
      { headers: {}, segments: ['tenants', '%61cme', 'orders', '7'] })).toBe(true)
    expect(holds([{ claim: 'tenant', equals: { param: 'tenant' } }], { tenant: 'acme' },
      { headers: {}, segments: ['tenants', 'acme%2Fother', 'orders', '7'] })).toBe(false)
    // Not UTF-8 once decoded: equal to nothing.
    expect(holds([{ claim: 'tenant', equals: { param: 'tenant' } }], { tenant: '\ufffd' },
      { headers: {}, segments: ['tenants', '%FF', 'orders', '7'] })).toBe(false)
    expect(holds([{ claim: 'order', equals: { param: 'id' } }], { order: 7 })).toBe(true)
    expect(holds([{ claim: 'order', equals: { param: 'id' } }], { order: 7 },
      { headers: {}, segments: ['tenants', 'acme', 'orders', '07'] })).toBe(false)
    expect(holds([{ claim: 'tenants', contains: { param: 'tenant' } }], { tenants: ['globex', 'acme'] })).toBe(true)
    expect(holds([{ claim: 'tenants', contains: { param: 'tenant' } }], { tenants: ['globex'] })).toBe(false)
  })

  it('a header is compared as one occurrence; absent, it is equal to nothing', () => {
    const request = (headers: Record<string, string | string[]>) => ({ headers, segments: ['tenants', 'acme', 'orders', '7'] })
    expect(holds([{ claim: 'tid', equals: { header: 'X-Tenant-Id' } }], { tid: 't1' }, request({ 'x-tenant-id': 't1' }))).toBe(true)
    expect(holds([{ claim: 'tid', equals: { header: 'X-Tenant-Id' } }], { tid: 't1' }, request({ 'x-tenant-id': 't1, t2' }))).toBe(false)
    expect(holds([{ claim: 'tid', equals: { header: 'X-Tenant-Id' } }], { tid: 't1' }, request({}))).toBe(false)
    expect(holds([{ claim: 'tid', equals: { header: 'Set-Cookie' } }], { tid: 't1' }, request({ 'set-cookie': ['t1'] }))).toBe(false)
  })

  it('all must hold, then one of any; the first failure is named by its place in the config', () => {
    const compiled = compile({ all: [{ claim: 'a', equals: 1 }, { claim: 'b', equals: 2 }], any: [{ claim: 'c', equals: 3 }, { claim: 'd', equals: 4 }] })
    expect(unmetCondition(compiled, { a: 1, b: 2, d: 4 }, undefined)).toBeUndefined()
    expect(unmetCondition(compiled, { a: 1, b: 0, d: 4 }, undefined)).toMatchObject({ label: 'claims.all[1]', text: 'b equals 2' })
    expect(unmetCondition(compiled, { a: 1, b: 2 }, undefined)).toBe('any')
  })
})
