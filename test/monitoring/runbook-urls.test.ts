import t from 'tap'
import { spawnSync } from 'node:child_process'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { RULES_FILE, RUNBOOK_DIRECTORY, alertingRules, readRulesFile, runbookBaseUrl } from '../../dev/scripts/alert-rules.js'
import { DEV_BUILD } from '../../dev/tools/service-process.js'
import { projectRoot } from '../../lib/project-root.js'
import { RUNBOOKS } from '../../routes/status.js'
import { buildTestApp } from '../helpers/app.js'

const OPS_TOKEN = 'an-operations-token-of-the-test'
const read = (path: string) => readFileSync(join(projectRoot, path), 'utf8')
const runbookUrls = (rules: string) => alertingRules(readRulesFile(rules)).map((rule) => rule.annotations?.runbook_url ?? 'none')

t.test('the shipped rules: every runbook_url is the shipped base and the name of a runbook that exists; the base is the runbooks through the shipped balancer', async (t) => {
  const base = runbookBaseUrl()
  const urls = runbookUrls(read(RULES_FILE))
  t.ok(urls.length > 40, `${urls.length} runbook links`)
  for (const url of urls) {
    t.ok(url.startsWith(base), `${url}: built from package.json config.runbookBaseUrl`)
    t.ok(existsSync(join(projectRoot, RUNBOOK_DIRECTORY, url.slice(base.length))), `${url}: docs/runbooks has it`)
  }
  // The balancer's TLS listener: its plain HTTP one only redirects.
  const balancer = /^\s+bind :(\d+) ssl /m.exec(read('deploy/haproxy/haproxy.cfg'))?.[1]
  const { protocol, hostname, port, pathname } = new URL(base)
  t.same({ protocol, hostname, port: port === '' ? '443' : port, pathname }, { protocol: 'https:', hostname: '127.0.0.1', port: balancer, pathname: RUNBOOKS }, 'the service\'s runbooks through the shipped balancer, on the monitoring host as the shipped prometheus.yml addresses its targets')
  t.notMatch(read(RULES_FILE), 'example.com', 'no made-up host')
})

t.test('printed with an operator\'s base, as docs/operations.md says: every runbook_url opens from a running instance without the operations token', async (t) => {
  t.match(read('docs/operations.md'), 'npm run -s monitoring:rules -- --runbook-base-url=', 'the documented command')
  const app = await buildTestApp(t, { OPS_TOKEN })
  const base = `${await app.listen({ port: 0, host: '127.0.0.1' })}${RUNBOOKS}`
  const printed = spawnSync(process.execPath, [join(DEV_BUILD, 'dev/scripts/generate-alert-rules.js'), '--print', `--runbook-base-url=${base}`], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 })
  t.equal(printed.status, 0, 'printed', { stderr: printed.stderr })
  const urls = runbookUrls(printed.stdout)
  t.equal(urls.length, runbookUrls(read(RULES_FILE)).length, 'every rule has one')
  for (const url of new Set(urls)) {
    t.ok(url.startsWith(base), `${url}: built from the given base`)
    const response = await fetch(url)
    t.equal(response.status, 200, `${url}: opens without the token`)
    t.match(response.headers.get('content-type'), 'text/plain')
    t.equal(await response.text(), read(join(RUNBOOK_DIRECTORY, url.slice(base.length))), `${url}: the runbook of the repository`)
  }
  t.equal((await fetch(new URL('/status/summary', base))).status, 401, 'the operator endpoints still need the token')
  t.equal((await fetch(new URL('/status', base))).status, 401, 'the status page too')
  const refused = spawnSync(process.execPath, [join(DEV_BUILD, 'dev/scripts/generate-alert-rules.js'), '--print', '--runbook-base-url=runbooks/'], { cwd: projectRoot, encoding: 'utf8', timeout: 60_000 })
  t.not(refused.status, 0, 'a base that is not an absolute URL is refused')
  t.match(refused.stderr, '--runbook-base-url must be an absolute http(s) URL ending in /')
})

t.test('every command in the runbooks names something the project ships', async (t) => {
  const manifest = read('deploy/kubernetes/portal-bff.yaml')
  const units = existsSync(join(projectRoot, 'deploy/systemd'))
  for (const file of readdirSync(join(projectRoot, RUNBOOK_DIRECTORY)).filter((name) => name.endsWith('.md'))) {
    const commands = [...read(join(RUNBOOK_DIRECTORY, file)).matchAll(/`((?:systemctl|journalctl|service|kubectl|docker|redis-cli|curl|amtool|promtool)\b[^`]*)`/g)].map(([, command]) => command!)
    for (const command of commands) {
      if (/^(systemctl|journalctl|service)\b/.test(command)) t.ok(units, `${file}: \`${command}\` names a unit the project does not ship`)
      const label = /-l (\S+)/.exec(command)?.[1]
      if (command.startsWith('kubectl') && label !== undefined) {
        const [name, value] = label.split('=')
        t.match(manifest, `${name ?? ''}: ${value ?? ''}`, `${file}: \`${command}\` selects the shipped manifest's label`)
      }
    }
  }
})
