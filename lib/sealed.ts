import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto'

const IV_BYTES = 12
const TAG_BYTES = 16

/**
 * Text kept at rest (in Redis) that only the service may read: AES-256-GCM under a key derived
 * from a secret setting, so every instance with the same secret reads what another sealed.
 */
export class Sealer {
  readonly #key: Buffer

  /** `purpose` keeps keys derived from one secret for different uses apart. */
  constructor (secret: string, purpose: string) {
    this.#key = Buffer.from(hkdfSync('sha256', secret, '', `portal-bff ${purpose}`, 32))
  }

  seal (text: string): string {
    const iv = randomBytes(IV_BYTES)
    const cipher = createCipheriv('aes-256-gcm', this.#key, iv)
    const sealed = Buffer.concat([cipher.update(text, 'utf8'), cipher.final()])
    return Buffer.concat([iv, cipher.getAuthTag(), sealed]).toString('base64url')
  }

  /** The text, or undefined when it was not sealed with this key (a changed secret) or was altered. */
  unseal (sealed: string): string | undefined {
    const bytes = Buffer.from(sealed, 'base64url')
    if (bytes.length < IV_BYTES + TAG_BYTES) return undefined
    try {
      const decipher = createDecipheriv('aes-256-gcm', this.#key, bytes.subarray(0, IV_BYTES))
      decipher.setAuthTag(bytes.subarray(IV_BYTES, IV_BYTES + TAG_BYTES))
      return Buffer.concat([decipher.update(bytes.subarray(IV_BYTES + TAG_BYTES)), decipher.final()]).toString('utf8')
    } catch {
      return undefined
    }
  }
}
