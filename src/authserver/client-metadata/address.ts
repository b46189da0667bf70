/**
 * Client ID Metadata Documents: where the server may connect to fetch a client's document.
 * A client_id is anyone's URL, so the fetch is an SSRF vector (draft-ietf-oauth-client-id-metadata-document
 * Security Considerations): every address a host resolves to must be public, and the socket connects to the very addresses
 * that were checked (the lookup below is the one the connection uses: no second resolution to rebind).
 */
import { lookup as dnsLookup } from 'node:dns/promises'
import { BlockList, isIP, type LookupFunction } from 'node:net'

export interface ResolvedAddress {
  readonly address: string
  readonly family: 4 | 6
}

/** Resolves a host name to every address; injected in tests. */
export type Resolver = (hostname: string) => Promise<readonly ResolvedAddress[]>

export const systemResolver: Resolver = async (hostname) =>
  (await dnsLookup(hostname, { all: true, verbatim: true })).map(({ address, family }) => ({ address, family: family === 6 ? 6 : 4 }))

const NOT_PUBLIC = new BlockList()
for (const [prefix, bits] of [
  ['0.0.0.0', 8], // "this network", unspecified
  ['10.0.0.0', 8], ['172.16.0.0', 12], ['192.168.0.0', 16], // RFC 1918
  ['100.64.0.0', 10], // CGNAT (RFC 6598)
  ['127.0.0.0', 8], // loopback
  ['169.254.0.0', 16], // link-local, cloud metadata services
  ['192.0.0.0', 24], ['192.0.2.0', 24], ['198.18.0.0', 15], ['198.51.100.0', 24], ['203.0.113.0', 24], // special, benchmark, documentation
  ['192.88.99.0', 24], // 6to4 relay anycast (RFC 7526): a tunnel to anywhere
  ['224.0.0.0', 4], ['240.0.0.0', 4], // multicast, reserved and broadcast
] as const) NOT_PUBLIC.addSubnet(prefix, bits, 'ipv4')
for (const [prefix, bits] of [
  ['::', 128], ['::1', 128], // unspecified, loopback
  ['fc00::', 7], // unique local (ULA)
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
  ['64:ff9b:1::', 48], // local-use NAT64 (RFC 8215): translated by a network of its own
  ['fec0::', 10], // site-local (deprecated, RFC 3879, still routed inside some networks)
  ['2001::', 32], // Teredo (RFC 4380): a tunnel whose IPv4 ends are obfuscated
  ['2001:db8::', 32], ['100::', 64], // documentation, discard
] as const) NOT_PUBLIC.addSubnet(prefix, bits, 'ipv6')

/** Whether an IP literal (IPv4, IPv6, IPv4-mapped IPv6) is a public unicast address. */
export function isPublicAddress(address: string): boolean {
  const bare = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address
  const family = isIP(bare)
  if (family === 0) return false
  if (family === 4) return !NOT_PUBLIC.check(bare, 'ipv4')
  // The WHATWG URL parser writes IPv6 one canonical way: ::ffff:127.0.0.1 and 0:0:0:0:0:ffff:7f00:1 both become ::ffff:7f00:1.
  const canonical = new URL(`http://[${bare}]/`).hostname.slice(1, -1)
  // An IPv6 address that carries an IPv4 address is that IPv4 address, judged as such.
  const carried = embeddedIpv4(hextets(canonical))
  if (carried !== undefined) return isPublicAddress(carried)
  return !NOT_PUBLIC.check(canonical, 'ipv6')
}

/** The eight 16-bit groups of a canonical IPv6 address (hexadecimal groups, `::` at most once). */
function hextets(canonical: string): number[] {
  const [head, tail] = canonical.includes('::') ? canonical.split('::') as [string, string] : [canonical, undefined]
  const parse = (part: string) => (part === '' ? [] : part.split(':').map((group) => parseInt(group, 16)))
  const front = parse(head)
  if (tail === undefined) return front
  const back = parse(tail)
  return [...front, ...Array<number>(8 - front.length - back.length).fill(0), ...back]
}

/**
 * The IPv4 address an IPv6 address carries: IPv4-compatible (`::a.b.c.d`, RFC 4291 §2.5.5.1), IPv4-mapped
 * (`::ffff:a.b.c.d`), SIIT (`::ffff:0:a.b.c.d`, RFC 2765), NAT64 well-known prefix (`64:ff9b::/96`, RFC 6052)
 * and 6to4 (`2002:AABB:CCDD::/48`, RFC 3056); undefined for any other.
 */
function embeddedIpv4(groups: readonly number[]): string | undefined {
  const zero = (from: number, to: number) => groups.slice(from, to).every((group) => group === 0)
  const ipv4 = (high: number, low: number) => `${high >> 8}.${high & 255}.${low >> 8}.${low & 255}`
  if (zero(0, 5) && (groups[5] === 0 || groups[5] === 0xffff)) return ipv4(groups[6]!, groups[7]!)
  if (zero(0, 4) && groups[4] === 0xffff && groups[5] === 0) return ipv4(groups[6]!, groups[7]!)
  if (groups[0] === 0x64 && groups[1] === 0xff9b && zero(2, 6)) return ipv4(groups[6]!, groups[7]!)
  if (groups[0] === 0x2002) return ipv4(groups[1]!, groups[2]!)
  return undefined
}

/** The refusal that carries which host failed (for the log), never which address. */
export class RefusedAddress extends Error {
  readonly code = 'ERR_PORTCULLIS_REFUSED_ADDRESS'
  override readonly name = 'RefusedAddress'
}

/** Every address of `hostname` when all of them are public; throws RefusedAddress when one is not. */
export async function resolvePublic(resolver: Resolver, hostname: string): Promise<readonly ResolvedAddress[]> {
  if (isIP(hostname) !== 0) {
    if (!isPublicAddress(hostname)) throw new RefusedAddress(`${hostname} is not a public address`)
    return [{ address: hostname, family: isIP(hostname) === 6 ? 6 : 4 }]
  }
  const addresses = await resolver(hostname)
  if (addresses.length === 0) throw new RefusedAddress(`${hostname} has no address`)
  // One private answer refuses all: a host that mixes them is probing us.
  if (addresses.some(({ address }) => !isPublicAddress(address))) throw new RefusedAddress(`${hostname} resolves to a non-public address`)
  return addresses
}

/**
 * A `lookup` for net/tls.connect (undici's `connect.lookup`): the connection goes to what it answers, so
 * what it answers has been checked. `allowPrivate` (allow_private_addresses) skips the check, not the resolver.
 */
export function validatingLookup(resolver: Resolver, allowPrivate: boolean): LookupFunction {
  return (hostname, options, callback) => {
    const resolved = allowPrivate ? resolver(hostname) : resolvePublic(resolver, hostname)
    resolved.then((addresses) => {
      const wanted = options.family === 4 || options.family === 6 ? addresses.filter((item) => item.family === options.family) : addresses
      if (wanted.length === 0) throw new RefusedAddress(`${hostname} has no address of the family asked for`)
      if (options.all) callback(null, wanted.map(({ address, family }) => ({ address, family })))
      else callback(null, wanted[0]!.address, wanted[0]!.family)
    }).catch((error: unknown) => callback(error as NodeJS.ErrnoException, '', 0))
  }
}
