import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { findProgram } from './packages.js'
import { tempDir } from './made.js'

export interface TestCertificate {
  /** The certificate and its key in one PEM file, as HAProxy's `crt` takes them. */
  pemPath: string
  /** The certificate alone: the authority a client of the test trusts. */
  ca: string
}

/** A self-signed certificate for localhost and 127.0.0.1, valid for two days, made by openssl in a directory of the test's own. */
export function selfSignedCertificate (): TestCertificate {
  const directory = tempDir('tls')
  const [key, certificate, pemPath] = ['key.pem', 'certificate.pem', 'haproxy.pem'].map((name) => join(directory, name)) as [string, string, string]
  execFileSync(findProgram('openssl') ?? 'openssl', [
    'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '2',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,IP:127.0.0.1',
    '-keyout', key, '-out', certificate
  ], { stdio: ['ignore', 'ignore', 'pipe'] })
  const ca = readFileSync(certificate, 'utf8')
  writeFileSync(pemPath, ca + readFileSync(key, 'utf8'))
  return { pemPath, ca }
}
