import { setTimeout as sleep } from 'node:timers/promises'

export async function waitFor (what: string, probe: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe().catch(() => false)) return
    if (Date.now() > deadline) throw new Error(`Timed out waiting for ${what}`)
    await sleep(50)
  }
}

export { exited } from '../../dev/tools/service-process.js'
