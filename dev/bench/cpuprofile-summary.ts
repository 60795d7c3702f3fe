import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'
import { projectRoot } from '../../lib/project-root.js'

// Reads a .cpuprofile (what `node --cpu-prof` writes: V8's sampled call tree) and says where the
// CPU time went: self time per function and per area (a package, Node's internals, the service's
// own code, the collector). `node dist-dev/dev/bench/cpuprofile-summary.js <file> [top]`.

interface CallFrame { functionName: string, url: string, lineNumber: number }
interface ProfileNode { id: number, callFrame: CallFrame, parent?: number, children?: number[] }
export interface CpuProfile { nodes: ProfileNode[], startTime: number, endTime: number, samples: number[], timeDeltas: number[] }

export interface SelfTime { name: string, area: string, microseconds: number }

export interface ProfileSummary {
  /** Sampled time within the window, idle included, µs. */
  totalMicroseconds: number
  idleMicroseconds: number
  functions: SelfTime[]
  areas: Array<{ area: string, microseconds: number }>
}

/** Where a frame's code comes from: a package, Node itself, this project, or V8. */
export function areaOf ({ functionName, url }: CallFrame): string {
  if (url === '') return functionName.startsWith('(') ? functionName : '(native)'
  if (url.startsWith('node:')) return 'node internals'
  const modules = url.lastIndexOf('/node_modules/')
  if (modules !== -1) {
    const [scope, name] = url.slice(modules + '/node_modules/'.length).split('/')
    return scope!.startsWith('@') ? `${scope}/${name}` : scope!
  }
  const relative = projectPath(url)
  return relative === undefined ? 'other' : `service: ${relative.split('/').slice(0, -1).join('/') || '.'}`
}

/** A file of the project (this one, or another build of it), relative to its root, without dist/ or dist-dev/. */
function projectPath (url: string): string | undefined {
  const path = url.replace(/^file:\/\//, '')
  const build = /\/dist(-dev)?\/(.*)$/.exec(path)
  if (build !== null) return build[2]
  return path.startsWith(`${projectRoot}/`) ? path.slice(projectRoot.length + 1) : undefined
}

function nameOf (frame: CallFrame): string {
  if (frame.url === '') return frame.functionName || '(native, unnamed)'
  const modules = frame.url.lastIndexOf('/node_modules/')
  const file = modules !== -1 ? frame.url.slice(modules + '/node_modules/'.length) : projectPath(frame.url) ?? frame.url
  return `${frame.functionName || '(anonymous)'} ${file}:${frame.lineNumber + 1}`
}

/**
 * Self time of every function and area, from the samples taken between `from` and `to` (µs on the
 * profile's clock, the system's monotonic clock: the same as `process.hrtime` of another process).
 */
export function summarise (profile: CpuProfile, window: { from?: number, to?: number } = {}): ProfileSummary {
  const frames = new Map(profile.nodes.map((node) => [node.id, node.callFrame]))
  const functions = new Map<string, SelfTime>()
  const areas = new Map<string, number>()
  let total = 0
  let idle = 0
  let time = profile.startTime
  for (let i = 0; i < profile.samples.length; i++) {
    time += profile.timeDeltas[i]!
    // A sample stands for the interval up to the next one.
    const spent = profile.timeDeltas[i + 1] ?? 0
    if ((window.from !== undefined && time < window.from) || (window.to !== undefined && time > window.to)) continue
    const frame = frames.get(profile.samples[i]!)!
    total += spent
    if (frame.functionName === '(idle)') {
      idle += spent
      continue
    }
    const name = nameOf(frame)
    const area = areaOf(frame)
    const entry = functions.get(name) ?? { name, area, microseconds: 0 }
    entry.microseconds += spent
    functions.set(name, entry)
    areas.set(area, (areas.get(area) ?? 0) + spent)
  }
  return {
    totalMicroseconds: total,
    idleMicroseconds: idle,
    functions: [...functions.values()].sort((a, b) => b.microseconds - a.microseconds),
    areas: [...areas].map(([area, microseconds]) => ({ area, microseconds })).sort((a, b) => b.microseconds - a.microseconds)
  }
}

/** Several summaries as one, as if one profile had taken all their samples (rounds of one target). */
export function mergeSummaries (summaries: ProfileSummary[]): ProfileSummary {
  const functions = new Map<string, SelfTime>()
  const areas = new Map<string, number>()
  for (const summary of summaries) {
    for (const { name, area, microseconds } of summary.functions) {
      const entry = functions.get(name) ?? { name, area, microseconds: 0 }
      entry.microseconds += microseconds
      functions.set(name, entry)
    }
    for (const { area, microseconds } of summary.areas) areas.set(area, (areas.get(area) ?? 0) + microseconds)
  }
  return {
    totalMicroseconds: summaries.reduce((sum, summary) => sum + summary.totalMicroseconds, 0),
    idleMicroseconds: summaries.reduce((sum, summary) => sum + summary.idleMicroseconds, 0),
    functions: [...functions.values()].sort((a, b) => b.microseconds - a.microseconds),
    areas: [...areas].map(([area, microseconds]) => ({ area, microseconds })).sort((a, b) => b.microseconds - a.microseconds)
  }
}

/** The summary as text: `top` functions and the areas, in µs per request when `requests` is given, and in percent of the busy time. */
export function formatSummary (summary: ProfileSummary, top: number, requests?: number): string {
  const busy = summary.totalMicroseconds - summary.idleMicroseconds
  const figure = (microseconds: number) => {
    const percent = `${(100 * microseconds / busy).toFixed(1).padStart(5)} %`
    return requests === undefined ? percent : `${percent} ${(microseconds / requests).toFixed(2).padStart(7)} µs/req`
  }
  return [
    `  busy ${(busy / 1e6).toFixed(2)} s of ${(summary.totalMicroseconds / 1e6).toFixed(2)} s sampled` +
      (requests === undefined ? '' : `; ${requests} requests, ${(busy / requests).toFixed(1)} µs of CPU each`),
    '  self time by area:',
    ...summary.areas.slice(0, 15).map(({ area, microseconds }) => `    ${figure(microseconds)}  ${area}`),
    `  top ${top} functions by self time:`,
    ...summary.functions.slice(0, top).map(({ name, microseconds }) => `    ${figure(microseconds)}  ${name}`)
  ].join('\n')
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const [file, top = '30'] = process.argv.slice(2)
  if (file === undefined) {
    process.stderr.write('usage: cpuprofile-summary.js <file.cpuprofile> [top]\n')
    process.exit(2)
  }
  const profile = JSON.parse(await readFile(file, 'utf8')) as CpuProfile
  process.stdout.write(`${file}\n${formatSummary(summarise(profile), Number(top))}\n`)
}
