import { join } from 'node:path'
import { UPSTREAMS } from '../../integrations/registry.js'
import { sandboxPortSetting } from '../sandbox/index.js'
import { DEV_BUILD, exited, runServer } from './service-process.js'

export interface SandboxProcess {
  /** The service settings it printed (URLs and credentials), as `npm run sandbox` shows them. */
  settings: Record<string, string>
  stop: () => Promise<void>
}

/**
 * The upstream sandbox as its own process (`dist-dev/dev/sandbox/cli.js`, what `npm run sandbox` runs) on
 * ephemeral ports: a client measured against it does not share its event loop with the simulators.
 */
export async function startSandboxProcess (timeoutMs = 30_000): Promise<SandboxProcess> {
  const { child, exit, stderr } = runServer({
    entry: join(DEV_BUILD, 'dev', 'sandbox', 'cli.js'),
    env: Object.fromEntries(UPSTREAMS.map(({ name }) => [sandboxPortSetting(name), '0']))
  })
  const stop = async () => {
    child.kill('SIGTERM')
    await exited(child)
  }
  const settings: Record<string, string> = {}
  let output = ''
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs)
  try {
    child.stdout!.setEncoding('utf8')
    // The settings are the last lines it prints; the CRM key's file is the last of them.
    for await (const chunk of child.stdout! as AsyncIterable<string>) {
      output += chunk
      if (/^CRM_PRIVATE_KEY_PATH=.*\n/m.test(output)) break
    }
  } finally {
    clearTimeout(timer)
  }
  for (const line of output.split('\n')) {
    const setting = /^([A-Z_]+)=(.*)$/.exec(line)
    if (setting !== null) settings[setting[1]!] = setting[2]!
  }
  if (settings.CRM_PRIVATE_KEY_PATH === undefined) {
    await stop()
    throw new Error(`the sandbox did not start (exit ${String(await exit)}): ${stderr()}`)
  }
  return { settings, stop }
}
