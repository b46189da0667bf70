/** Grant type identifiers the server's modules share (RFC 6749 §4.5 extension grants). */
import type { GrantType } from '../config/schema.js'

/** RFC 8628 §3.4: the grant_type of a device's poll. */
export const DEVICE_CODE_GRANT_TYPE = 'urn:ietf:params:oauth:grant-type:device_code' satisfies GrantType
