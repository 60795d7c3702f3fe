import { join } from 'node:path'
import { DEV_BUILD, type RunOptions } from '../tools/service-process.js'
import {
  CONNECTIONS, DATABASE_URL, ROUNDS, SECONDS,
  cpuTime, deleteKeys, ensureDatabase, failures, load, median, rate, runKeyPrefix, serviceEnv, startQuiet, stop, withServers, type CpuTime, type Measure, ALT_NODE, altEnv
} from './common.js'

const ROUNDS_OF_HEALTH = Number(process.env.BENCH_HEALTH_ROUNDS ?? Math.max(ROUNDS, 6))
const WARM_UP_SECONDS = 2
// Another build of the project (its dist-dev folder): a change to the service measured against
// this build in the same run, in alternating rounds, before it is made here.
const ALT_BUILD = process.env.BENCH_ALT_BUILD

/** A measured load, with the CPU time the server used meanwhile. */
interface Run extends Measure { cpu: CpuTime }

interface Target { name: string, options: RunOptions, measures: Run[] }

/**
 * GET /health of the minimal app, of this build's service and, with BENCH_ALT_BUILD, of another
 * build's: each a fresh process every round, in another order every round, nothing else measured.
 */
export async function benchHealthBuilds (): Promise<void> {
  await ensureDatabase()
  const keyPrefix = runKeyPrefix('health-ab')
  const env = serviceEnv({ DATABASE_URL, REDIS_KEY_PREFIX: keyPrefix, SHUTDOWN_DELAY_MS: '0' })
  const target = (name: string, entry: string, targetEnv: Record<string, string>, node?: string): Target => ({ name, options: { entry, node, env: targetEnv }, measures: [] })
  const minimal = target('minimal', join(DEV_BUILD, 'dev', 'bench', 'minimal-app.js'), {})
  const service = target('service', join(DEV_BUILD, 'dev', 'server.js'), env)
  const alt = ALT_BUILD === undefined ? undefined : target('service (alt build)', join(ALT_BUILD, 'dev', 'server.js'), { ...env, ...altEnv() }, ALT_NODE)
  const targets = [minimal, service, ...alt === undefined ? [] : [alt]]
  try {
    await withServers(async (start) => {
      for (let round = 1; round <= ROUNDS_OF_HEALTH; round++) {
        const order = targets.map((_, i) => targets[(i + round) % targets.length]!)
        for (const target of order) {
          const server = await start(target.options)
          const url = `${server.url}/health`
          await load({ url, duration: WARM_UP_SECONDS })
          const before = await cpuTime(server.child.pid!)
          const measure = await load({ url })
          const after = await cpuTime(server.child.pid!)
          target.measures.push({ ...measure, cpu: { user: after.user - before.user, system: after.system - before.system } })
          await stop(server)
        }
        process.stdout.write(`round ${round}: ${targets.map(({ name, measures }) => `${name} ${rate(measures.slice(-1)).toFixed(0)} req/s`).join(', ')}\n`)
      }
    }, startQuiet)
  } finally {
    await deleteKeys(keyPrefix)
  }
  // CPU time per request: what the server spends on one, whatever the machine gave it meanwhile.
  const cpu = ({ measures }: Target, part: keyof CpuTime) => measures.reduce((sum, run) => sum + run.cpu[part], 0) / measures.reduce((sum, run) => sum + run.requests, 0)
  const cpuLine = (target: Target) => `${(cpu(target, 'user') + cpu(target, 'system')).toFixed(1)} µs (user ${cpu(target, 'user').toFixed(1)}, system ${cpu(target, 'system').toFixed(1)})`
  const cpuRatio = (of: Target, to: Target) => ((cpu(to, 'user') + cpu(to, 'system')) / (cpu(of, 'user') + cpu(of, 'system'))).toFixed(3)
  const ratio = (of: Target, to: Target) => {
    const perRound = of.measures.map((measure, round) => rate([measure]) / rate([to.measures[round]!]))
    return `${(rate(of.measures) / rate(to.measures)).toFixed(3)}, median of rounds ${median(perRound).toFixed(3)} (rounds ${Math.min(...perRound).toFixed(2)}-${Math.max(...perRound).toFixed(2)})`
  }
  process.stdout.write([
    '',
    `GET /health, ${CONNECTIONS} connections, ${ROUNDS_OF_HEALTH} rounds of ${SECONDS} s, each target a fresh process every round`,
    ...targets.map((target) => `  ${`${target.name}:`.padEnd(36)}${rate(target.measures).toFixed(0)} req/s (non-2xx or errors: ${failures(target.measures)}); CPU a request ${cpuLine(target)}`),
    `  ratio service / minimal:            ${ratio(service, minimal)} (target >= 0.85)`,
    `    in CPU a request (minimal / service): ${cpuRatio(service, minimal)}`,
    ...alt === undefined
      ? []
      : [
          `  ratio alt build / minimal:          ${ratio(alt, minimal)}; in CPU a request ${cpuRatio(alt, minimal)}`,
          `  ratio alt build / service:          ${ratio(alt, service)}; in CPU a request ${cpuRatio(alt, service)} (${ALT_BUILD})`
        ],
    ''
  ].join('\n'))
}
