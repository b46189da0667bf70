/**
 * `check` for clients that authenticate with a TLS client certificate (RFC 8705 §2): what each method needs of
 * the client's entry, and of the public listener that must ask for the certificate (`server.tls`).
 */
import { X509Certificate } from 'node:crypto'
import { readFileSync } from 'node:fs'
import type { ClientConfig, GatewayConfig } from '../config/schema.js'
import type { Problem } from '../common/problem.js'
import { CERTIFICATE_AUTH_METHODS } from './registered-client.js'

export const CERTIFICATE_METHODS: ReadonlySet<string> = new Set(CERTIFICATE_AUTH_METHODS)

/** One client's certificate settings, against its method and the listener. */
export function lintCertificateClient(config: GatewayConfig, client: ClientConfig, at: Array<string | number>, problems: Problem[]): void {
  const method = client.token_endpoint_auth_method
  const named = [client.tls_client_auth_subject_dn, client.tls_client_auth_san_dns].filter((value) => value !== undefined).length
  if (method !== 'tls_client_auth' && named > 0) {
    problems.push({ path: at, message: 'tls_client_auth_subject_dn and tls_client_auth_san_dns go with token_endpoint_auth_method: tls_client_auth' })
  }
  if (method !== 'self_signed_tls_client_auth' && client.self_signed_certificate_file !== undefined) {
    problems.push({ path: [...at, 'self_signed_certificate_file'], message: 'goes with token_endpoint_auth_method: self_signed_tls_client_auth' })
  }
  if (method === undefined || !CERTIFICATE_METHODS.has(method)) return
  const tls = config.server?.tls
  if (tls?.client_certificates !== 'request') {
    problems.push({ path: [...at, 'token_endpoint_auth_method'], message: `${method} needs server.tls with client_certificates: request (the listener must ask for the certificate)` })
  }
  if (method === 'tls_client_auth') {
    if (named !== 1) problems.push({ path: at, message: 'tls_client_auth needs exactly one of tls_client_auth_subject_dn or tls_client_auth_san_dns (RFC 8705 §2.1.2)' })
    if (tls?.client_ca_file === undefined) {
      problems.push({ path: [...at, 'token_endpoint_auth_method'], message: 'tls_client_auth needs server.tls.client_ca_file: the CAs its certificate must chain to' })
    }
    return
  }
  const file = client.self_signed_certificate_file
  if (file === undefined) {
    problems.push({ path: at, message: 'self_signed_tls_client_auth needs self_signed_certificate_file: the certificate the client presents (PEM)' })
    return
  }
  try {
    new X509Certificate(readFileSync(file))
  } catch (error) {
    problems.push({ path: [...at, 'self_signed_certificate_file'], message: `is not a readable PEM certificate (${(error as Error).message})` })
  }
}

/** `server.tls.client_ca_file` is read only when the listener asks for certificates. */
export function lintListenerCertificates(config: GatewayConfig, problems: Problem[]): void {
  const tls = config.server?.tls
  if (tls?.client_ca_file !== undefined && tls.client_certificates !== 'request') {
    problems.push({ path: ['server', 'tls', 'client_ca_file'], message: 'needs client_certificates: request' })
  }
}
