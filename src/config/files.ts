/** Files the config names: checked at load so that `start` never fails on one later. */
import { accessSync, constants } from 'node:fs'

/** Whether this process can read `file`. */
export function readable(file: string): boolean {
  try {
    accessSync(file, constants.R_OK)
    return true
  } catch {
    return false
  }
}
