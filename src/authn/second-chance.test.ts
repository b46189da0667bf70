import { describe, expect, it } from 'vitest'
import { SecondChance } from './second-chance.js'

const entry = (n: number) => ({ n, visited: false })

describe('SecondChance (the token caches\' bounded map)', () => {
  it('never holds more than max entries, whatever the order of sets, hits and deletes', () => {
    for (const max of [1, 2, 3, 7, 100]) {
      const map = new SecondChance<ReturnType<typeof entry>>(max)
      let seed = max
      const next = () => (seed = (seed * 1103515245 + 12345) % 2147483648) % (max * 4)
      for (let i = 0; i < 5000; i++) {
        const key = String(next())
        const op = next() % 3
        if (op === 0) map.set(key, entry(i))
        else if (op === 1) map.get(key)
        else map.delete(key)
        expect(map.size).toBeLessThanOrEqual(max)
      }
    }
  })

  it('holds max entries exactly, and keeps an entry in use while new ones push the others out', () => {
    const map = new SecondChance<ReturnType<typeof entry>>(3)
    for (const key of ['kept', 'a', 'b']) map.set(key, entry(0))
    expect(map.size).toBe(3)
    for (let i = 0; i < 10; i++) {
      expect(map.get('kept')?.n).toBe(0)
      map.set(`new-${i}`, entry(i))
      expect(map.size).toBe(3)
    }
    expect(map.get('a')).toBeUndefined()
    expect(map.get('b')).toBeUndefined()
    expect(map.get('new-9')?.n).toBe(9)
  })

  it('counts what it drops to make room, and a delete is not a drop', () => {
    const map = new SecondChance<ReturnType<typeof entry>>(2)
    map.set('a', entry(1))
    map.set('b', entry(2))
    map.set('c', entry(3))
    expect(map.evicted).toBe(1)
    expect(map.keys()).toEqual(['b', 'c'])
    expect(map.delete('c')).toBe(true)
    expect(map.delete('c')).toBe(false)
    expect(map.evicted).toBe(1)
  })

  it('replaces a value in place without making room', () => {
    const map = new SecondChance<ReturnType<typeof entry>>(2)
    map.set('a', entry(1))
    map.set('b', entry(1))
    map.set('a', entry(2))
    expect(map.evicted).toBe(0)
    expect([...map.entries()].map(([key, value]) => `${key}=${value.n}`)).toEqual(['a=2', 'b=1'])
  })

  it('evicts in one pass when every entry was visited: each loses its mark once, then the oldest goes', () => {
    const map = new SecondChance<ReturnType<typeof entry>>(3)
    for (const key of ['a', 'b', 'c']) map.set(key, entry(0))
    for (const key of ['a', 'b', 'c']) map.get(key)
    map.set('d', entry(1))
    expect(map.keys()).toEqual(['b', 'c', 'd'])
    expect(map.evicted).toBe(1)
  })
})
