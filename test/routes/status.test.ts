import t from 'tap'
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { setTimeout as sleep } from 'node:timers/promises'
import type { AddressInfo } from 'node:net'
import { chromium } from 'playwright-core'
import { buildTestApp } from '../helpers/app.js'
import { PrivateRedis } from '../helpers/private-redis.js'
import { projectRoot } from '../../lib/project-root.js'
import { THRESHOLDS } from '../../plugins/app/monitoring/thresholds.js'
import { findProgram, skipWithout } from '../helpers/packages.js'

const CHROMIUM = findProgram('chromium')

t.test('the status page is static HTML, CSS and JS that the service\'s CSP allows', async (t) => {
  const app = await buildTestApp(t)
  const page = await app.inject('/status')
  t.equal(page.statusCode, 200)
  t.match(page.headers['content-type'], /^text\/html/)
  t.match(page.headers['content-security-policy'], /script-src 'self'/, 'helmet\'s default policy: no inline script')
  const scripts = [...page.body.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)]
  t.ok(scripts.length > 0 && scripts.every(([, attributes, body]) => /\bsrc="/.test(attributes ?? '') && body?.trim() === ''), 'every script is a file')
  t.notMatch(page.body, /\son[a-z]+=/i, 'no inline event handlers (script-src-attr \'none\')')
  const script = await app.inject('/status/status.js')
  t.equal(script.statusCode, 200)
  t.match(script.headers['content-type'], /^(text|application)\/javascript/, 'served as JavaScript')
  t.equal(script.headers['cache-control'], 'no-cache', 'asked for again, so a new release shows at once')
  t.match(script.body, /REFRESH_MS = 30_000/, 'polls every 30 s')
  t.match((await app.inject('/status/status.css')).headers['content-type'], /^text\/css/)
  const runbook = await app.inject('/status/runbooks/core_status.md')
  t.equal(runbook.statusCode, 200, 'the runbooks are served beside the page, for its links')
  t.match(runbook.headers['content-type'], /^text\/plain/, 'as text a browser shows')
  t.equal(runbook.body, readFileSync(join(projectRoot, 'docs/runbooks/core_status.md'), 'utf8'))

  const summary = (await app.inject('/status/summary')).json()
  t.match(summary, { level: 'ok', core: { status: 'ok', checks: { database: 'ok', cache: 'ok' } }, billing: { health: 'healthy' }, crm: { health: 'healthy', dailyUsage: {} } })
  t.same(summary.jobs, { waiting: 0, active: 0, delayed: 0, failed: 0, completed: 0, recentFailed: 0 }, 'the job queue, with the failures its health is judged on')
  t.same(summary.orders, { awaitingApproval: { count: 0, oldestAgeMs: null }, approvedNotReceived: { count: 0, oldestAgeMs: null }, unknown: { count: 0, oldestAgeMs: null } }, 'the orders in Pending Review, awaiting approval and unknown apart')
  t.equal(summary.alerts.length, THRESHOLDS.length, 'every alert')
})

t.test('in headless Chromium: the ok state, then a stopped Redis as a failing cache check and a critical alert', { skip: skipWithout(['chromium']) }, async (t) => {
  const redis = await PrivateRedis.start()
  t.teardown(() => redis.kill())
  const profile = mkdtempSync(join(tmpdir(), 'portal-bff-chromium-'))
  t.teardown(() => rmSync(profile, { recursive: true, force: true }))
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM!,
    headless: true,
    viewport: { width: 1280, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']
  })
  t.teardown(() => browser.close())
  const app = await buildTestApp(t, { REDIS_URL: redis.url, HEALTH_CHECK_TIMEOUT_MS: '500' })
  await app.listen({ host: '127.0.0.1', port: 0 })
  const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}/status`
  const page = browser.pages()[0] ?? await browser.newPage()
  const problems: string[] = []
  page.on('console', (message) => { if (message.type() === 'error') problems.push(message.text()) })
  page.on('pageerror', (error) => problems.push(error.message))
  // The README's screenshots are taken anew only when asked: every run would otherwise change them.
  const screenshots = process.env.UPDATE_SCREENSHOTS === '1' ? join(projectRoot, 'docs') : profile
  mkdirSync(screenshots, { recursive: true })

  await page.goto(url)
  await page.waitForSelector('body[data-loaded="true"]', { timeout: 10_000 })
  t.equal(await page.getAttribute('body', 'data-level'), 'ok', 'overall: ok')
  t.equal(await page.textContent('#overall'), 'ok')
  t.equal(await page.isVisible('#cause'), false, 'nothing to explain while ok')
  t.equal(await page.textContent('#core [data-field=status]'), 'ok', 'core health ok')
  t.equal(await page.locator('#alerts tbody tr').count(), THRESHOLDS.length, 'every alert')
  t.equal(await page.locator('#alerts tbody tr[data-level="ok"]').count(), THRESHOLDS.length, 'all of them ok')
  t.match(await page.textContent('#billing'), /healthy/, 'the billing queue')
  t.match(await page.textContent('#crm [data-field=usage]'), /of 15000/, 'CRM usage against its limit')
  t.ok(await page.textContent('#jobs'), 'the job queue')
  t.match(await page.textContent('#orders'), /awaiting approval0.*approved, not received0/, 'the orders in Pending Review')
  t.match(await page.textContent('#subscriber'), /no data|state/, 'the subscriber, or no data')
  await page.screenshot({ path: join(screenshots, 'status-ok.png'), fullPage: true })

  await redis.kill()
  await sleep(1100)
  await page.click('#refresh')
  await page.waitForSelector('body[data-level="critical"]', { timeout: 10_000 })
  t.equal(await page.textContent('#core [data-field=status]'), 'degraded', 'core health degraded')
  const cache = page.locator('#core dd').nth(1)
  t.equal(await cache.textContent(), 'fail', 'the cache check fails')
  t.equal(await cache.getAttribute('data-level'), 'critical', 'in red')
  t.equal(await page.getAttribute('#alerts tr[data-measure="core_status"]', 'data-level'), 'critical', 'a critical alert')
  t.match(await page.textContent('#alerts tr[data-measure="core_status"]'), /P1/, 'with its priority')
  const cause = page.locator('#cause a[data-measure="core_status"]')
  t.equal(await cause.getAttribute('href'), '#alert-core_status', 'the badge names the row that set it, and links to it')
  t.match(await cause.getAttribute('title'), 'docs/runbooks/core_status.md', 'and to its runbook')
  const runbook = page.locator('#alerts tr[data-measure="core_status"] .runbook a')
  t.match(await runbook.textContent(), 'docs/runbooks/core_status.md', 'the runbook named')
  const opened = await page.request.get(new URL(String(await runbook.getAttribute('href')), page.url()).href)
  t.equal(opened.status(), 200, 'and linked: the link opens it')
  t.match(await opened.text(), /^# /, 'the runbook itself')
  await page.screenshot({ path: join(screenshots, 'status-cache-down.png'), fullPage: true })

  t.same(problems, [], 'no script error and no content security policy violation')
  // Before the service: an open page keeps connections to it.
  await browser.close()
})

t.test('with the subscription on, the summary carries its figures (dropped events, replay granted)', async (t) => {
  const app = await buildTestApp(t, { CRM_EVENTS_ENABLED: 'true' })
  await new Promise((resolve) => setTimeout(resolve, 1000))
  const summary = await app.inject('/status/summary')
  t.equal(summary.statusCode, 200)
  t.match(summary.json().subscriber, { state: String, dropped: 0 })
})
