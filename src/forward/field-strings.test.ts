import { describe, expect, it } from 'vitest'
import { FieldStrings } from './field-strings.js'

/** What the table must always give: the strings made afresh. */
function reference(name: Buffer, value: Buffer): [string, string] {
  return [name.toString('latin1').toLowerCase(), value.toString('latin1')]
}

function read(field: FieldStrings, name: Buffer | string, value: Buffer | string): [string, string] {
  field.read(Buffer.isBuffer(name) ? name : Buffer.from(name, 'latin1'), Buffer.isBuffer(value) ? value : Buffer.from(value, 'latin1'))
  return [field.name, field.value]
}

describe('response header fields as strings (the kept-strings table)', () => {
  it('gives the lower-cased name and the value, whatever the case the upstream spelled the name in', () => {
    const field = new FieldStrings()
    expect(read(field, 'Content-Type', 'application/json')).toEqual(['content-type', 'application/json'])
    expect(read(field, 'CONTENT-TYPE', 'application/json')).toEqual(['content-type', 'application/json'])
    expect(read(field, 'content-type', 'Application/JSON')).toEqual(['content-type', 'Application/JSON'])
  })

  it('never gives a kept value for other bytes: one byte changed, the same length, a prefix, a longer value', () => {
    const field = new FieldStrings()
    expect(read(field, 'Content-Length', '77')).toEqual(['content-length', '77'])
    expect(read(field, 'Content-Length', '78')).toEqual(['content-length', '78'])
    expect(read(field, 'Content-Length', '7')).toEqual(['content-length', '7'])
    expect(read(field, 'Content-Length', '778')).toEqual(['content-length', '778'])
    expect(read(field, 'Content-Length', '')).toEqual(['content-length', ''])
    expect(read(field, 'Content-Length', '778')).toEqual(['content-length', '778'])
  })

  it('copies what it keeps: the Buffer undici reuses for the next response changes nothing kept', () => {
    const field = new FieldStrings()
    const socket = Buffer.from('X-Reused: secret-a')
    const name = socket.subarray(0, 8)
    const value = socket.subarray(10)
    expect(read(field, name, value)).toEqual(['x-reused', 'secret-a'])
    socket.write('X-REUSED: secret-b')
    expect(read(field, name, value)).toEqual(['x-reused', 'secret-b'])
    socket.write('x-reusee: secret-b')
    expect(read(field, name, value)).toEqual(['x-reusee', 'secret-b'])
  })

  it('makes fields over 64 bytes afresh, and still right', () => {
    const field = new FieldStrings()
    const longName = `X-${'A'.repeat(100)}`
    const longValue = 'v'.repeat(200)
    for (let i = 0; i < 3; i++) expect(read(field, longName, longValue)).toEqual([longName.toLowerCase(), longValue])
    expect(read(field, longName, `${longValue}w`)).toEqual([longName.toLowerCase(), `${longValue}w`])
    expect(read(field, 'X-Short', longValue)).toEqual(['x-short', longValue])
    expect(read(field, 'X-Short', `w${longValue.slice(1)}`)).toEqual(['x-short', `w${longValue.slice(1)}`])
  })

  it('lower-cases a name that is not ASCII as toLowerCase does (latin1), and gives its value right', () => {
    const field = new FieldStrings()
    const name = Buffer.from([0x58, 0x2d, 0xc0, 0xde])  // X-ÀÞ
    expect(read(field, name, 'a')).toEqual(reference(name, Buffer.from('a')))
    expect(read(field, name, 'b')).toEqual(reference(name, Buffer.from('b')))
    // Only ASCII letters fold: `[` (0x5b) and `{` (0x7b) are other names, though `| 0x20` would make them one.
    expect(read(field, 'X-[', '1')).toEqual(['x-[', '1'])
    expect(read(field, 'X-{', '2')).toEqual(['x-{', '2'])
    expect(read(field, 'X-[', '3')).toEqual(['x-[', '3'])
  })

  it('matches making every string afresh over many fields that share slots (random names and values, few letters)', () => {
    const field = new FieldStrings()
    let seed = 42
    const random = (n: number) => {
      seed = (Math.imul(seed, 1103515245) + 12345) >>> 0
      return seed % n
    }
    const letters = 'aAbB-'
    const word = (max: number) => Array.from({ length: random(max) + 1 }, () => letters[random(letters.length)]).join('')
    // About 1 000 distinct names for 256 slots: collisions and replacements all the time.
    for (let i = 0; i < 20_000; i++) {
      const name = Buffer.from(word(6), 'latin1')
      const value = Buffer.from(random(4) === 0 ? word(80) : word(3), 'latin1')
      expect(read(field, name, value)).toEqual(reference(name, value))
    }
  })
})
