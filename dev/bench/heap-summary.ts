import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

// Compares two V8 heap snapshots of one process (`HeapProfiler.takeHeapSnapshot`): what the objects
// made between them weigh, by kind, and what holds them. The streams suite takes one before and one
// after opening its streams (BENCH_STREAM_HEAP=1): divided by the streams, what one costs.
// `node dist-dev/dev/bench/heap-summary.js <before> <after> [divisor] [top]`.

interface Snapshot {
  snapshot: { meta: { node_fields: string[], node_types: [string[]], edge_fields: string[], edge_types: [string[]] } }
  nodes: number[]
  edges: number[]
  strings: string[]
}

export interface HeapGroup { kind: string, count: number, bytes: number }

export interface HeapDifference {
  /** Objects of `after` that were not in `before`, by kind (type and constructor name). */
  kinds: HeapGroup[]
  /** The same objects by what first refers to them: the holder's kind and the property. */
  holders: HeapGroup[]
}

/** `type:name` of a node; strings of any content are one kind. */
function kindOf (type: string, name: string): string {
  if (type.includes('string')) return `${type}`
  if (type === 'code' || type === 'hidden' || type === 'array') return `${type}:${name.slice(0, 40)}`
  return `${type}:${name.slice(0, 60)}`
}

export function compareSnapshots (before: Snapshot, after: Snapshot): HeapDifference {
  const { meta } = after.snapshot
  const fields = meta.node_fields.length
  const edgeFields = meta.edge_fields.length
  const [typeAt, nameAt, idAt, sizeAt, edgesAt] = ['type', 'name', 'id', 'self_size', 'edge_count'].map((field) => meta.node_fields.indexOf(field)) as [number, number, number, number, number]
  const [edgeTypeAt, edgeNameAt, toAt] = ['type', 'name_or_index', 'to_node'].map((field) => meta.edge_fields.indexOf(field)) as [number, number, number]
  const known = new Set<number>()
  for (let node = 0; node < before.nodes.length; node += fields) known.add(before.nodes[node + idAt]!)
  const { nodes, edges, strings } = after
  const kind = (node: number) => kindOf(meta.node_types[0][nodes[node + typeAt]!]!, strings[nodes[node + nameAt]!]!)

  // The first strong reference to each node: enough to tell what keeps a kind of object.
  const holder = new Map<number, string>()
  let edge = 0
  for (let node = 0; node < nodes.length; node += fields) {
    for (let i = 0; i < nodes[node + edgesAt]!; i++, edge += edgeFields) {
      const type = meta.edge_types[0][edges[edge + edgeTypeAt]!]!
      if (type === 'weak' || type === 'shortcut') continue
      const to = edges[edge + toAt]!
      if (holder.has(to)) continue
      const name = type === 'element' || type === 'hidden' ? `[${edges[edge + edgeNameAt]}]` : strings[edges[edge + edgeNameAt]!]
      holder.set(to, `${kind(node)} .${name}`)
    }
  }
  const kinds = new Map<string, HeapGroup>()
  const holders = new Map<string, HeapGroup>()
  const add = (groups: Map<string, HeapGroup>, key: string, bytes: number) => {
    const group = groups.get(key) ?? { kind: key, count: 0, bytes: 0 }
    group.count++
    group.bytes += bytes
    groups.set(key, group)
  }
  for (let node = 0; node < nodes.length; node += fields) {
    if (known.has(nodes[node + idAt]!)) continue
    const bytes = nodes[node + sizeAt]!
    add(kinds, kind(node), bytes)
    add(holders, `${kind(node)} <- ${holder.get(node) ?? '(none)'}`, bytes)
  }
  const sorted = (groups: Map<string, HeapGroup>) => [...groups.values()].sort((a, b) => b.bytes - a.bytes)
  return { kinds: sorted(kinds), holders: sorted(holders) }
}

export function formatDifference ({ kinds, holders }: HeapDifference, divisor: number, top: number): string {
  const total = kinds.reduce((sum, group) => sum + group.bytes, 0)
  const line = ({ kind, count, bytes }: HeapGroup) => `    ${(bytes / divisor).toFixed(0).padStart(6)} B ${(count / divisor).toFixed(2).padStart(7)}  ${kind}`
  return [
    `  new objects: ${(total / divisor).toFixed(0)} B per unit (bytes and count per unit, of ${divisor})`,
    '  by kind:',
    ...kinds.slice(0, top).map(line),
    '  by kind and holder:',
    ...holders.slice(0, top).map(line)
  ].join('\n')
}

export async function readSnapshot (file: string): Promise<Snapshot> {
  return JSON.parse(await readFile(file, 'utf8')) as Snapshot
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [beforeFile, afterFile, divisor = '1', top = '30'] = process.argv.slice(2)
  if (beforeFile === undefined || afterFile === undefined) {
    process.stderr.write('usage: heap-summary.js <before.heapsnapshot> <after.heapsnapshot> [divisor] [top]\n')
    process.exit(2)
  }
  const difference = compareSnapshots(await readSnapshot(beforeFile), await readSnapshot(afterFile))
  process.stdout.write(`${formatDifference(difference, Number(divisor), Number(top))}\n`)
}
