/**
 * The part of YAML the Kubernetes manifests of deploy/ are written in, read without a YAML
 * dependency: documents split by `---`, block mappings and sequences by indentation, plain, quoted
 * or flow-sequence scalars, and `{}`. Anything else (anchors, tags, block scalars, flow mappings,
 * tabs) is refused with its line, so a manifest cannot drift into YAML this would read wrongly.
 */

interface Line { indent: number, text: string, number: number }

export class YamlSubsetError extends Error {
  constructor (line: number, problem: string) {
    super(`line ${line}: ${problem}`)
    this.name = 'YamlSubsetError'
  }
}

/** A comment starts at a `#` at the line's start or after a space, outside quotes. */
function withoutComment (text: string): string {
  let quote: string | undefined
  for (let at = 0; at < text.length; at++) {
    const char = text[at]!
    if (quote !== undefined) {
      if (char === quote) quote = undefined
    } else if (char === '"' || char === "'") {
      quote = char
    } else if (char === '#' && (at === 0 || text[at - 1] === ' ')) {
      return text.slice(0, at)
    }
  }
  return text
}

function scalar (text: string, number: number): unknown {
  if (text === '{}') return {}
  if (/^[&*!|>{]/.test(text)) throw new YamlSubsetError(number, `unsupported YAML: ${text}`)
  if (text.startsWith('"')) {
    if (!/^"([^"\\]|\\.)*"$/.test(text)) throw new YamlSubsetError(number, `unterminated string: ${text}`)
    return JSON.parse(text)
  }
  if (text.startsWith("'")) {
    if (!/^'([^']|'')*'$/.test(text)) throw new YamlSubsetError(number, `unterminated string: ${text}`)
    return text.slice(1, -1).replaceAll("''", "'")
  }
  if (text.startsWith('[')) {
    if (!text.endsWith(']')) throw new YamlSubsetError(number, `unterminated sequence: ${text}`)
    const inner = text.slice(1, -1).trim()
    if (inner === '') return []
    const items = inner.match(/("([^"\\]|\\.)*"|'([^']|'')*'|[^,]+)/g) ?? []
    return items.map((item) => scalar(item.trim(), number))
  }
  if (text === 'true' || text === 'false') return text === 'true'
  if (text === 'null' || text === '~' || text === '') return null
  if (/^-?\d+(\.\d+)?$/.test(text)) return Number(text)
  return text
}

const KEY = /^("[^"]*"|'[^']*'|[^\s"'#][^:]*?):(?:\s+(.*))?$/

function parseNode (lines: Line[], at: number, indent: number): [unknown, number] {
  const first = lines[at]!
  return first.text === '-' || first.text.startsWith('- ') ? parseSequence(lines, at, indent) : parseMapping(lines, at, indent)
}

/** The value after `key:` or `-` with nothing on its line: the block below it, if any. */
function parseNested (lines: Line[], at: number, parentIndent: number, sequenceAllowed: boolean): [unknown, number] {
  const next = lines[at]
  if (next !== undefined && next.indent > parentIndent) return parseNode(lines, at, next.indent)
  // A mapping's sequence may sit at the key's own indentation.
  if (sequenceAllowed && next !== undefined && next.indent === parentIndent && (next.text === '-' || next.text.startsWith('- '))) {
    return parseSequence(lines, at, parentIndent)
  }
  return [null, at]
}

function parseMapping (lines: Line[], start: number, indent: number): [Record<string, unknown>, number] {
  const mapping: Record<string, unknown> = {}
  let at = start
  while (at < lines.length && lines[at]!.indent === indent) {
    const line = lines[at]!
    if (line.text.startsWith('- ') || line.text === '-') break
    const match = KEY.exec(line.text)
    if (match === null) throw new YamlSubsetError(line.number, `not a key: ${line.text}`)
    const key = String(scalar(match[1]!, line.number))
    if (key in mapping) throw new YamlSubsetError(line.number, `key ${key} given twice`)
    const rest = match[2]?.trim() ?? ''
    if (rest === '') {
      [mapping[key], at] = parseNested(lines, at + 1, indent, true)
    } else {
      mapping[key] = scalar(rest, line.number)
      at++
    }
  }
  if (at < lines.length && lines[at]!.indent > indent) throw new YamlSubsetError(lines[at]!.number, 'unexpected indentation')
  return [mapping, at]
}

function parseSequence (lines: Line[], start: number, indent: number): [unknown[], number] {
  const sequence: unknown[] = []
  let at = start
  while (at < lines.length && lines[at]!.indent === indent && (lines[at]!.text === '-' || lines[at]!.text.startsWith('- '))) {
    const line = lines[at]!
    const item = line.text.slice(1).trimStart()
    if (item === '') {
      let value: unknown
      [value, at] = parseNested(lines, at + 1, indent, false)
      sequence.push(value)
    } else if (KEY.test(item) && !/^["'[]/.test(item)) {
      // `- key: value`: a mapping whose keys sit at the column of this first one.
      const column = indent + line.text.length - item.length
      const rest: Line[] = [{ indent: column, text: item, number: line.number }, ...lines.slice(at + 1)]
      const [value, next] = parseMapping(rest, 0, column)
      sequence.push(value)
      at = at + next
    } else {
      sequence.push(scalar(item, line.number))
      at++
    }
  }
  return [sequence, at]
}

/** Every document of a multi-document file. */
export function parseYamlDocuments (text: string): unknown[] {
  const documents: Line[][] = [[]]
  for (const [index, raw] of text.split('\n').entries()) {
    const number = index + 1
    if (raw.includes('\t')) throw new YamlSubsetError(number, 'tab character')
    const content = withoutComment(raw).trimEnd()
    if (content.trim() === '') continue
    if (content === '---') {
      documents.push([])
      continue
    }
    const indent = content.length - content.trimStart().length
    documents.at(-1)!.push({ indent, text: content.trim(), number })
  }
  return documents.filter((lines) => lines.length > 0).map((lines) => {
    const [value, next] = parseNode(lines, 0, lines[0]!.indent)
    if (next < lines.length) throw new YamlSubsetError(lines[next]!.number, 'unexpected indentation')
    return value
  })
}
