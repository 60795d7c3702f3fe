const CASE_SAFE_SUFFIX = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ012345'

/** A Salesforce record id, in its 15- or 18-character form. */
export function isSalesforceId (value: string): boolean {
  return /^[a-zA-Z0-9]{15}(?:[a-zA-Z0-9]{3})?$/.test(value)
}

/**
 * The 18-character, case-insensitive form of a 15-character Salesforce id: each of its three
 * 5-character chunks adds a character whose bits say which of the chunk's letters are capitals.
 * Any other string is returned as it is.
 */
export function caseSafeId (id: string): string {
  if (!/^[a-zA-Z0-9]{15}$/.test(id)) return id
  let suffix = ''
  for (let chunk = 0; chunk < 3; chunk++) {
    let bits = 0
    for (let position = 0; position < 5; position++) {
      const character = id[chunk * 5 + position] ?? ''
      if (character >= 'A' && character <= 'Z') bits |= 1 << position
    }
    suffix += CASE_SAFE_SUFFIX[bits]
  }
  return id + suffix
}
