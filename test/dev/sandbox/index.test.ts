import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import t from 'tap'
import { startSandbox } from '../../../dev/sandbox/index.js'
import { DEV_BUILD } from '../../../dev/tools/service-process.js'

const sandbox = await startSandbox({ crm: { streaming: { connectTimeoutMs: 200 } } })
t.teardown(() => sandbox.close())

async function control (url: string, method: string, path: string, body?: unknown): Promise<{ status: number, body: unknown }> {
  const response = await fetch(`${url}/__sandbox/${path}`, {
    method,
    ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) })
  })
  const text = await response.text()
  return { status: response.status, body: text === '' ? undefined : JSON.parse(text) }
}

t.test('settings point the service at the simulators', async t => {
  const { settings, billing, crm, telecom } = sandbox
  t.same(Object.keys(settings).sort(), [
    'BILLING_API_IDENTIFIER', 'BILLING_API_SECRET', 'BILLING_API_URL', 'CRM_CLIENT_ID', 'CRM_LOGIN_URL',
    'CRM_PRIVATE_KEY', 'CRM_USERNAME', 'TELECOM_API_KEY', 'TELECOM_API_URL'
  ])
  t.match(settings.BILLING_API_URL, /^http:\/\/127\.0\.0\.1:\d+\/includes\/api\.php$/)
  t.equal(settings.CRM_LOGIN_URL, crm.url)
  t.equal(settings.TELECOM_API_URL, telecom.url)
  t.match(settings.CRM_PRIVATE_KEY, /^-----BEGIN PRIVATE KEY-----/)
  t.equal(settings.BILLING_API_SECRET, billing.secret)
  t.equal(new Set([billing.port, crm.port, telecom.port]).size, 3)
})

t.test('faults and calls over HTTP', async t => {
  const { billing } = sandbox
  t.equal((await control(billing.url, 'POST', 'faults', { kind: 'http5xx', status: 502, times: 1 })).status, 201)
  t.equal((await control(billing.url, 'POST', 'faults', { kind: 'teleport' })).status, 400, 'an unknown fault is refused')
  const failed = await fetch(billing.apiUrl, { method: 'POST', body: new URLSearchParams({ action: 'WhmcsDetails' }) })
  t.equal(failed.status, 502)
  const { body } = await control(billing.url, 'GET', 'calls')
  t.match(body, { calls: [{ method: 'POST', route: 'WhmcsDetails' }] })
  t.equal((await control(billing.url, 'DELETE', 'calls')).status, 204)
  t.same(await control(billing.url, 'GET', 'calls'), { status: 200, body: { calls: [] } })
  await control(billing.url, 'POST', 'faults', { kind: 'latency', ms: 10 })
  t.equal((await control(billing.url, 'DELETE', 'faults')).status, 204)
  t.same(billing.faults, [])
})

t.test('down over HTTP, back on the same port after ms', async t => {
  const { telecom } = sandbox
  t.equal((await control(telecom.url, 'POST', 'down', { ms: 300 })).status, 202)
  await new Promise(resolve => setTimeout(resolve, 100))
  t.notOk(telecom.isUp)
  await new Promise(resolve => setTimeout(resolve, 400))
  t.ok(telecom.isUp)
  t.equal((await fetch(`${telecom.url}/v1/status`, { headers: { authorization: `Bearer ${telecom.apiKey}` } })).status, 200)
})

t.test('CRM controls: orders, limits, events, sessions', async t => {
  const { crm } = sandbox
  const created = await control(crm.url, 'POST', 'orders', { Status: 'Pending Review', BillingOrderId__c: '7' })
  t.equal(created.status, 201)
  t.match(await control(crm.url, 'GET', 'orders'), { body: { orders: [{ Status: 'Pending Review', BillingOrderId__c: '7' }] } })
  t.equal((await control(crm.url, 'POST', 'orders', { Nope__c: 1 })).status, 400)
  t.same(await control(crm.url, 'PUT', 'limits', { used: 10, max: 20 }), { status: 200, body: { used: 10, max: 20 } })
  const event = await control(crm.url, 'POST', 'events', { orderId: (created.body as { id: string }).id })
  t.same(event, { status: 201, body: { replayId: 1 } })
  t.match(await control(crm.url, 'GET', 'events'), { body: { events: [{ data: { event: { replayId: 1 } } }] } })
  t.equal((await control(crm.url, 'POST', 'events/expire', { throughReplayId: 1 })).status, 204)
  t.same(crm.retainedEvents, [])
  for (const path of ['drop-sessions', 'expire-tokens', 'connects/stop', 'connects/resume']) {
    t.equal((await control(crm.url, 'POST', path)).status, 204, path)
  }
  t.match(await control(crm.url, 'GET', 'streaming'), { body: { stats: { handshakes: 0 }, clients: 0 } })
  t.equal((await control(crm.url, 'POST', 'nothing')).status, 404)
})

t.test('the CLI prints the settings, writes the key to a file and stops on SIGTERM', async t => {
  const cli = spawn(process.execPath, [join(DEV_BUILD, 'dev', 'sandbox', 'cli.js')], {
    env: { ...process.env, SANDBOX_BILLING_PORT: '0', SANDBOX_CRM_PORT: '0', SANDBOX_TELECOM_PORT: '0' },
    stdio: ['ignore', 'pipe', 'inherit']
  })
  let output = ''
  cli.stdout.setEncoding('utf8')
  for await (const chunk of cli.stdout) {
    output += chunk as string
    if (output.includes('TELECOM_API_KEY=')) break
  }
  const settings = Object.fromEntries(output.split('\n').filter(line => /^[A-Z_]+=/.test(line)).map(line => line.split(/=(.*)/s).slice(0, 2)))
  t.notOk('CRM_PRIVATE_KEY' in settings, 'the key is not printed')
  t.match(readFileSync(settings.CRM_PRIVATE_KEY_PATH, 'utf8'), /^-----BEGIN PRIVATE KEY-----/)
  const status = await fetch(`${String(settings.TELECOM_API_URL)}/v1/status`, { headers: { authorization: `Bearer ${String(settings.TELECOM_API_KEY)}` } })
  t.equal(status.status, 200)
  cli.kill('SIGTERM')
  const [code] = await once(cli, 'exit')
  t.equal(code, 0)
  t.notOk(existsSync(settings.CRM_PRIVATE_KEY_PATH), 'the key file is removed')
})

t.test('a restarted sandbox gives no order id an earlier run gave, so a database kept between runs meets none twice', async t => {
  const placeOrders = async () => {
    const run = await startSandbox()
    try {
      const { identifier, secret } = run.billing
      const form = new URLSearchParams({ identifier, secret, action: 'AddOrder', responsetype: 'json', clientid: '1', paymentmethod: 'mailin' })
      form.append('pid[0]', '1')
      form.append('billingcycle[0]', 'monthly')
      const added = await (await fetch(run.settings.BILLING_API_URL!, { method: 'POST', body: form })).json() as { orderid: number }
      return { billing: added.orderid, crm: run.crm.putOrder({ Status: 'Pending Review' }) }
    } finally {
      await run.close()
    }
  }
  const first = await placeOrders()
  // Ids count on from the clock, by the second.
  await sleep(1100)
  const second = await placeOrders()
  t.ok(second.billing > first.billing, `billing order ${second.billing} after ${first.billing}`)
  t.not(second.crm, first.crm, 'another CRM order id')
})
