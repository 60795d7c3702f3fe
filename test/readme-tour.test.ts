import { spawn, type ChildProcess } from 'node:child_process'
import { mkdirSync, readFileSync } from 'node:fs'
import { setTimeout as sleep } from 'node:timers/promises'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { projectRoot } from '../lib/project-root.js'
import { ensureTestDatabase, tempDir, testEnv, testSchemaUrl } from './helpers/app.js'
import { exited, waitFor } from './helpers/processes.js'
import { startService } from './helpers/service-process.js'

const root = projectRoot

// The tour is written for a reader's `npm start`; the test's instance listens elsewhere.
const TOUR_BASE_URL = 'http://localhost:3000'
const TOUR_HEADING = /^##\s+Five-minute tour\s*$/

interface Block { line: number, text: string }

/** The ```sh blocks between the tour's heading and the next heading of its level or above. */
function tourBlocks (readme: string): Block[] {
  const lines = readme.split('\n')
  const blocks: Block[] = []
  let inTour = false
  let open: Block | undefined
  let fence: string | undefined
  lines.forEach((text, index) => {
    const marker = /^\s{0,3}(`{3,}|~{3,})\s*(\S*)/.exec(text)
    if (fence !== undefined) {
      if (marker !== null && marker[1] === fence && marker[2] === '') {
        if (open !== undefined) blocks.push(open)
        open = undefined
        fence = undefined
      } else if (open !== undefined) {
        open.text += `${text}\n`
      }
      return
    }
    if (marker !== null) {
      fence = marker[1]
      if (inTour && marker[2] === 'sh') open = { line: index + 1, text: '' }
      return
    }
    if (/^#{1,2}\s/.test(text)) inTour = TOUR_HEADING.test(text)
  })
  return blocks
}

/** The shell variables a block assigns, so that later blocks see them as a reader's shell would. */
function assignedNames (text: string): string[] {
  return [...text.matchAll(/^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=/gm)].map((match) => match[1]!)
}

interface Outcome { code: number | null, stdout: string, stderr: string }

const collect = (child: ChildProcess) => {
  const output = { stdout: '', stderr: '' }
  child.stdout?.setEncoding('utf8').on('data', (chunk: string) => { output.stdout += chunk })
  child.stderr?.setEncoding('utf8').on('data', (chunk: string) => { output.stderr += chunk })
  return output
}

interface Step {
  what: string
  /** Which block of the tour this step is. */
  block: RegExp
  /** The SSE stream: run in the background, as in a terminal of its own. */
  background?: true
  check?: (t: Test, outcome: Outcome, vars: Record<string, string>) => void
  /** What must have happened before the next block runs, as a reader would wait for it. */
  until?: () => Promise<void>
}

// What the tour says you will see, step by step. Each block of the tour is exactly one step.
function tourSteps (stream: () => string): Step[] {
  return [
    {
      what: 'sign in',
      block: /\/auth\/login/,
      check: (t, { stdout }, vars) => {
        t.match(vars.TOKEN, /^[\w-]+\.[\w-]+\.[\w-]+$/, 'TOKEN holds an access token')
        t.equal(stdout.trim(), `TOKEN=${vars.TOKEN ?? ''}`, 'the line to paste in another terminal')
      }
    },
    {
      what: 'list invoices',
      block: /\/api\/invoices/,
      check: (t, { stdout }) => {
        const list = JSON.parse(stdout) as { invoices: unknown[], total: number }
        t.equal(list.total, 5, 'five invoices')
        t.equal(list.invoices.length, 5)
      }
    },
    {
      what: 'watch the SSE stream',
      block: /curl .*-N .*\/api\/events/,
      background: true,
      until: () => waitFor('the SSE stream to open', async () => stream().includes('retry: 3000'), 10_000)
    },
    {
      what: 'place an order',
      block: /\/api\/orders -H/,
      check: (t, { stdout }, vars) => {
        t.match(JSON.parse(stdout), { productId: '1', billingCycle: 'monthly', status: 'Pending Review' }, 'the order waits in Pending Review')
        t.match(vars.ORDER_ID, /^[0-9a-f-]{36}$/, 'ORDER_ID is the order\'s id')
        t.match(vars.CRM_ORDER_ID, /^801\w{15}$/, 'CRM_ORDER_ID is the CRM order\'s 18-character id')
      },
      until: () => waitFor('Pending Review on the stream', async () => stream().includes('"status":"Pending Review"'), 10_000)
    },
    {
      what: 'raise the platform event on the sandbox CRM',
      block: /__sandbox\/events/,
      check: (t, { stdout }, vars) => {
        t.match(vars.CRM, /^http:\/\/127\.0\.0\.1:\d+$/, 'the sandbox CRM\'s URL, read from the log')
        t.match(JSON.parse(stdout), { replayId: Number })
      },
      until: () => waitFor('Active on the stream', async () => stream().includes('"status":"Active"'), 20_000)
    },
    {
      what: 'see it provisioned',
      block: /\/api\/orders\/\$ORDER_ID/,
      check: (t, { stdout }, vars) => {
        t.match(JSON.parse(stdout), { id: vars.ORDER_ID, status: 'Active', msisdn: /^\+?\d+$/ }, 'Active, with its number')
      }
    },
    {
      what: 'core health',
      block: /\/health$/m,
      check: (t, { stdout }) => { t.same(JSON.parse(stdout), { status: 'ok', checks: { database: 'ok', cache: 'ok' } }) }
    },
    {
      what: 'queues',
      block: /\/health\/queues/,
      check: (t, { stdout }) => {
        t.match(JSON.parse(stdout), {
          billing: { health: 'healthy' },
          crm: { health: 'healthy' },
          jobs: { completed: 1 },
          events: { state: 'connected', received: 1 }
        }, 'one job completed, one event received, the subscription connected')
      }
    },
    {
      what: 'alerts',
      block: /\/health\/alerts/,
      check: (t, { stdout }) => {
        const judged = JSON.parse(stdout) as { level: string, alerts: Array<{ measure: string, level: string }> }
        t.ok(judged.alerts.length > 0, `${judged.alerts.length} measures judged`)
        t.same(judged.alerts.filter((alert) => alert.level !== 'ok'), [], 'each is ok on a quiet instance')
        t.equal(judged.level, 'ok')
      }
    },
    {
      what: 'the status page',
      block: /\/status$/m,
      check: (t, { stdout }) => { t.match(stdout, /^200 text\/html/) }
    },
    {
      what: 'the OpenAPI document',
      block: /\/docs\/json/,
      check: (t, { stdout }) => { t.match(stdout, /^\{"openapi":"3\./) }
    },
    {
      what: 'sign out',
      block: /\/auth\/logout/
    }
  ]
}

t.test('the parser finds the tour\'s sh blocks and nothing else', async (t) => {
  const readme = [
    '# Title', '```sh', 'echo before', '```',
    '## Five-minute tour', 'Text.', '```sh', 'echo one', 'echo two', '```',
    '```json', '{"not": "run"}', '```',
    '### A step', '````sh', 'echo three', '```', 'echo still three', '````',
    '## Documentation', '```sh', 'echo after', '```'
  ].join('\n')
  t.same(tourBlocks(readme), [
    { line: 7, text: 'echo one\necho two\n' },
    { line: 15, text: 'echo three\n```\necho still three\n' }
  ])
  t.same(assignedNames('A=1\n  export B=$(x)\necho C=3\nd_1=4\n'), ['A', 'B', 'd_1'])
})

t.test('the README\'s five-minute tour runs as written', async (t) => {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const blocks = tourBlocks(readme)
  let streamOutput = { stdout: '', stderr: '' }
  const steps = tourSteps(() => streamOutput.stdout)

  // Each block is one step and each step one block, so an edited tour fails here rather than go unchecked.
  const plan = blocks.map((block) => ({ block, steps: steps.filter((step) => step.block.test(block.text)) }))
  t.same(plan.filter(({ steps }) => steps.length !== 1).map(({ block, steps }) => `README line ${block.line}: ${steps.length} steps match`), [],
    'every ```sh block of the tour is one known step')
  t.same(steps.filter((step) => !blocks.some((block) => step.block.test(block.text))).map((step) => step.what), [], 'every step is in the tour')
  if (t.passing() === false) return

  // The instance as `npm start` runs it, with the sandbox for the upstreams and the events subscription on.
  await ensureTestDatabase()
  const workDir = tempDir('tour')
  const logDir = join(workDir, 'logs')
  mkdirSync(logDir)
  const service = await startService(testEnv({ DATABASE_URL: await testSchemaUrl(t), CRM_EVENTS_ENABLED: 'true', LOG_DIR: logDir }))
  t.teardown(async () => {
    service.child.kill('SIGTERM')
    await Promise.race([service.exit, sleep(10_000, undefined, { ref: false })])
    service.child.kill('SIGKILL')
  })
  // A reader reaches step 5 long after the subscription has connected; an event raised before would be missed.
  await waitFor('the platform-event subscription', async () => {
    const queues = await (await fetch(`${service.url}/health/queues`)).json() as { events?: { state?: string } }
    return queues.events?.state === 'connected'
  }, 20_000)

  const vars: Record<string, string> = {}
  let stream: { child: ChildProcess, exit: Promise<number | null> } | undefined
  t.teardown(() => { if (stream !== undefined && stream.child.exitCode === null) process.kill(-stream.child.pid!, 'SIGKILL') })

  for (const [index, { block, steps: [step] }] of plan.entries()) {
    const text = block.text.replaceAll(TOUR_BASE_URL, service.url)
    const background = step!.background === true
    // Run as pasted, stopping at the first failing command; its variables go on to the next blocks.
    const varsFile = join(workDir, `vars-${index}`)
    const names = assignedNames(text)
    const handOn = names.length === 0 ? '' : `printf '%s\\0' ${names.map((name) => `"${name}=\${${name}-}"`).join(' ')} > "$TOUR_VARS"\n`
    const child = spawn('sh', ['-c', `set -e\n${text}\n${handOn}`], {
      cwd: workDir,
      env: { PATH: process.env.PATH, HOME: process.env.HOME, ...vars, TOUR_VARS: varsFile },
      stdio: ['ignore', 'pipe', 'pipe'],
      // Its own process group, so that the stream's curl can be stopped with its shell.
      detached: background
    })
    const output = collect(child)
    if (background) {
      streamOutput = output
      stream = { child, exit: exited(child) }
    } else {
      const code = await exited(child)
      t.equal(code, 0, `${step!.what} (README line ${block.line}) exits 0${code === 0 ? '' : `: ${output.stderr}`}`)
      if (code !== 0) return
      if (names.length > 0) {
        for (const entry of readFileSync(varsFile, 'utf8').split('\0').filter((entry) => entry !== '')) {
          const at = entry.indexOf('=')
          vars[entry.slice(0, at)] = entry.slice(at + 1)
        }
      }
      step!.check?.(t, { code, ...output }, vars)
    }
    await step!.until?.()
  }

  // Signed out, the stream ends by itself: the token's revocation reaches it.
  t.ok(stream !== undefined, 'the stream ran')
  if (stream === undefined) return
  const streamCode = await Promise.race([stream.exit, sleep(10_000, 'still open', { ref: false })])
  t.equal(streamCode, 0, 'the stream ended at sign-out, and curl exited 0')
  const statuses = [...streamOutput.stdout.matchAll(/"status":"([^"]+)"/g)].map((match) => match[1])
  t.same(statuses, ['Pending Review', 'Provisioning', 'Active'], 'the stream showed the order\'s way to Active')
  t.match(streamOutput.stdout, /event: session\.ended\ndata: \{"reason":"logged_out"\}/, 'and ended with session.ended')
})
