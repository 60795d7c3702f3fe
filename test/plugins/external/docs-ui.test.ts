import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { chromium } from 'playwright-core'
import { buildTestApp } from '../../helpers/app.js'
import { findProgram, skipWithout } from '../../helpers/packages.js'

const CHROMIUM = findProgram('chromium')

t.test('in headless Chromium, /docs: portal tags first, sign in with the example body, Authorize, list invoices', { skip: skipWithout(['chromium']) }, async (t) => {
  const profile = mkdtempSync(join(tmpdir(), 'portal-bff-chromium-'))
  t.teardown(() => rmSync(profile, { recursive: true, force: true }))
  const browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM!,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']
  })
  t.teardown(() => browser.close())
  const app = await buildTestApp(t)
  await app.listen({ host: '127.0.0.1', port: 0 })
  const page = browser.pages()[0] ?? await browser.newPage()
  const problems: string[] = []
  page.on('pageerror', (error) => problems.push(error.message))

  await page.goto(`http://127.0.0.1:${(app.server.address() as AddressInfo).port}/docs`)
  await page.waitForSelector('.opblock-tag-section', { timeout: 10_000 })
  t.same(await page.locator('.opblock-tag-section h3').evaluateAll((headings) => headings.map((heading) => heading.getAttribute('data-tag'))),
    ['auth', 'invoices', 'orders', 'events', 'health', 'alerts', 'metrics', 'status', 'events-parked'], 'the portal API first')

  const signIn = page.locator('#operations-auth-signIn')
  await signIn.locator('.opblock-summary').click()
  await signIn.locator('.try-out__btn').click()
  await signIn.locator('.execute').click()
  const answer = signIn.locator('.live-responses-table .response-col_description .microlight').first()
  await answer.waitFor({ timeout: 10_000 })
  const { accessToken } = JSON.parse(await answer.innerText()) as { accessToken: string }
  t.ok(accessToken, 'the example body signs in')

  await page.locator('.auth-wrapper .authorize').click()
  const bearerAuth = page.locator('.auth-container').filter({ hasText: 'bearerAuth' })
  await bearerAuth.locator('input').fill(accessToken)
  await bearerAuth.locator('button.authorize').click()
  await page.locator('.dialog-ux .close-modal').click()

  const invoices = page.locator('#operations-invoices-listInvoices')
  await invoices.locator('.opblock-summary').click()
  await invoices.locator('.try-out__btn').click()
  await invoices.locator('.execute').click()
  const status = invoices.locator('.live-responses-table .response .response-col_status').first()
  await status.waitFor({ timeout: 10_000 })
  t.equal((await status.innerText()).trim(), '200', 'the invoices, with the token Authorize sends')
  t.same(problems, [], 'no script error')
})
