import { chromium, type BrowserContext, type BrowserContextOptions, type Page } from 'playwright-core'
import { findProgram } from './packages.js'
import { JANE } from './sessions.js'

interface Teardown { teardown (fn: () => unknown): void }

/** Headless Chromium (skip the test with `skipWithout(['chromium'])`) with one fresh profile, closed when the test ends. */
export async function portalBrowser (t: Teardown, options: BrowserContextOptions = {}): Promise<BrowserContext> {
  const browser = await chromium.launch({
    executablePath: findProgram('chromium')!,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync']
  })
  t.teardown(() => browser.close())
  return browser.newContext(options)
}

/** Signs in on the reference page's form, and waits for the page to say so. */
export async function signInOnPage (page: Page, user: { email: string, password: string } = JANE, timeoutMs = 15_000): Promise<void> {
  await page.waitForSelector('body[data-state=signed-out]', { timeout: timeoutMs })
  await page.fill('#sign-in [name=email]', user.email)
  await page.fill('#sign-in [name=password]', user.password)
  await page.click('#sign-in button[type=submit]')
  await page.waitForSelector('body[data-state=signed-in]', { timeout: timeoutMs })
}
