/**
 * A private certificate authority made at test time with the openssl CLI, in a fresh temp dir: no
 * certificate is ever checked in, and nothing here is trusted outside the test that asks for it.
 */
import { execFileSync } from 'node:child_process'
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'

export interface IssuedCertificate {
  certFile: string
  keyFile: string
  cert: string
  key: string
}

export interface TestCa {
  dir: string
  /** The CA certificate (PEM) and its file, for `ca_file` or a client's `ca`. */
  caFile: string
  ca: string
  /** A server certificate signed by this CA; `altNames` like `IP:127.0.0.1`, `DNS:localhost`. */
  issue(name: string, altNames?: readonly string[]): IssuedCertificate
  remove(): void
}

function openssl(dir: string, args: readonly string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
}

/** EC P-256 keys: quick to make, and every TLS 1.2/1.3 stack speaks ECDSA. */
function newKey(dir: string, file: string): void {
  openssl(dir, ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', file])
}

export function createTestCa(commonName = 'Portcullis Test CA'): TestCa {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-tls-'))
  newKey(dir, 'ca.key')
  openssl(dir, ['req', '-x509', '-new', '-key', 'ca.key', '-sha256', '-days', '2', '-subj', `/CN=${commonName}`,
    '-addext', 'basicConstraints=critical,CA:true',
    '-addext', 'keyUsage=critical,keyCertSign,cRLSign', '-out', 'ca.crt'])
  const caFile = path.join(dir, 'ca.crt')
  let serial = 1
  return {
    dir,
    caFile,
    ca: readFileSync(caFile, 'utf8'),
    issue(name, altNames = ['IP:127.0.0.1', 'DNS:localhost']) {
      const keyFile = path.join(dir, `${name}.key`)
      const certFile = path.join(dir, `${name}.crt`)
      newKey(dir, `${name}.key`)
      openssl(dir, ['req', '-new', '-key', `${name}.key`, '-subj', `/CN=${name}`, '-out', `${name}.csr`])
      writeFileSync(path.join(dir, `${name}.ext`), [
        'basicConstraints = critical, CA:false',
        'keyUsage = critical, digitalSignature',
        'extendedKeyUsage = serverAuth, clientAuth',
        'subjectKeyIdentifier = hash',
        'authorityKeyIdentifier = keyid',
        `subjectAltName = ${altNames.join(', ')}`,
      ].join('\n'))
      openssl(dir, ['x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.crt', '-CAkey', 'ca.key', '-set_serial', String(++serial),
        '-sha256', '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.crt`])
      return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') }
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  }
}

/** A self-signed client certificate (RFC 8705 §2.2: `self_signed_tls_client_auth`), in a directory of its own. */
export function createSelfSignedCertificate(name: string): IssuedCertificate & { remove(): void } {
  const dir = mkdtempSync(path.join(tmpdir(), 'portcullis-self-signed-'))
  newKey(dir, `${name}.key`)
  // -utf8: a common name outside ASCII is written as UTF-8 (the certificate-bound tests send one upstream).
  openssl(dir, ['req', '-x509', '-new', '-utf8', '-key', `${name}.key`, '-sha256', '-days', '2', '-subj', `/CN=${name}`, '-out', 'cert.crt'])
  const certFile = path.join(dir, 'cert.crt')
  const keyFile = path.join(dir, `${name}.key`)
  return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8'), remove: () => rmSync(dir, { recursive: true, force: true }) }
}
