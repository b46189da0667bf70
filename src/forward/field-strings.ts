/**
 * Upstream response header fields as strings, from the Buffers undici hands over. Each Buffer's
 * `toString('latin1')` is a call into C++ and a new string: about 90 ns a field, and a response has five or
 * more. An upstream sends the same few names, and mostly the same values, on every response, so a fixed
 * table keeps the strings last made: a slot is found by a hash of the bytes, and its string is used only
 * when its bytes are the field's, compared one by one (a name without regard to ASCII case, since it is
 * used lower-cased; a value exactly). Anything else is made as before.
 *
 * Bounded whatever the upstream sends: 256 slots, a field of at most 64 bytes (longer ones are never kept),
 * and a slot is simply replaced by the next field that hashes to it. Names that are not ASCII are not kept.
 */

const SLOTS = 256
const MAX_KEPT = 64

interface NameSlot {
  /** The name lower-cased, as bytes. */
  readonly bytes: Buffer
  readonly name: string
  /** The last value seen under this name, as bytes and as the string. */
  valueBytes: Buffer | undefined
  value: string | undefined
}

/** ASCII upper case to lower case; every other byte as it is (as toLowerCase() treats a latin1 string's ASCII). */
function lowerAscii(byte: number): number {
  return byte >= 65 && byte <= 90 ? byte | 0x20 : byte
}

function slotOf(bytes: Buffer): number {
  let hash = bytes.length
  for (let i = 0; i < bytes.length; i++) hash = (Math.imul(hash, 31) + lowerAscii(bytes[i]!)) | 0
  return hash & (SLOTS - 1)
}

/** The kept slot of this name, when the slot holds this very name (ASCII case aside). */
function keptName(slots: readonly (NameSlot | undefined)[], bytes: Buffer, slot: number): NameSlot | undefined {
  const kept = slots[slot]
  if (kept === undefined || kept.bytes.length !== bytes.length) return undefined
  const keptBytes = kept.bytes
  for (let i = 0; i < bytes.length; i++) if (lowerAscii(bytes[i]!) !== keptBytes[i]) return undefined
  return kept
}

function isAscii(bytes: Buffer): boolean {
  for (let i = 0; i < bytes.length; i++) if (bytes[i]! > 0x7f) return false
  return true
}

/**
 * A response header field: its name lower-cased (`name.toString('latin1').toLowerCase()`) and its value
 * (`value.toString('latin1')`), the strings made for the same bytes before when the table has them.
 */
export class FieldStrings {
  name = ''
  value = ''
  /** This reader's table: two readers share nothing. */
  private readonly slots: (NameSlot | undefined)[] = new Array<NameSlot | undefined>(SLOTS).fill(undefined)

  /** Sets `name` and `value` from the field's bytes. */
  read(name: Buffer, value: Buffer): void {
    const slot = slotOf(name)
    let kept = keptName(this.slots, name, slot)
    if (kept === undefined) {
      this.name = name.toString('latin1').toLowerCase()
      if (name.length > MAX_KEPT || !isAscii(name)) {
        this.value = value.toString('latin1')
        return
      }
      kept = { bytes: Buffer.from(this.name, 'latin1'), name: this.name, valueBytes: undefined, value: undefined }
      this.slots[slot] = kept
    } else {
      this.name = kept.name
    }
    this.value = keptValue(kept, value)
  }
}

/** The value's string: the one kept under its name when the bytes are the same, else a new one (kept if short). */
function keptValue(kept: NameSlot, value: Buffer): string {
  const keptBytes = kept.valueBytes
  if (keptBytes !== undefined && keptBytes.length === value.length) {
    let i = 0
    while (i < value.length && value[i] === keptBytes[i]) i++
    if (i === value.length) return kept.value!
  }
  const text = value.toString('latin1')
  if (value.length <= MAX_KEPT) {
    kept.valueBytes = Buffer.from(value)
    kept.value = text
  }
  return text
}
