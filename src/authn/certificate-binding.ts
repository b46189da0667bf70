/**
 * RFC 8705 §3: a token bound to a TLS client certificate (`cnf.x5t#S256`) is accepted only on a connection
 * that presented that very certificate; anything else is 401 invalid_token. The bind stage's second case,
 * beside DPoP's proof of possession (src/server/stages/token.ts).
 */
import type { IncomingMessage } from 'node:http'
import { peerCertificate } from '../common/client-certificate.js'
import { InvalidToken } from '../errors/oauth-errors.js'

/**
 * Throws InvalidToken unless the request's connection presented the certificate `x5t` names. `described`: a
 * decision for a proxy in front, which terminated TLS: no certificate of the client's can be seen, so none matches.
 */
export function requireBoundCertificate(req: IncomingMessage, x5t: string, described: boolean): void {
  if (described) {
    throw new InvalidToken('certificate_bound: the token is bound to a TLS client certificate, which a decision cannot see', undefined, 'certificate_mismatch')
  }
  const peer = peerCertificate(req.socket)
  if (peer === undefined) {
    throw new InvalidToken('certificate_bound: the token is bound to a TLS client certificate and the connection presented none', undefined, 'certificate_mismatch')
  }
  if (peer.thumbprint !== x5t) {
    throw new InvalidToken('certificate_bound: the connection\'s client certificate is not the one the token is bound to', undefined, 'certificate_mismatch')
  }
}
