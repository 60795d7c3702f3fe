import { WebSocket } from 'undici'

/** The inspector address a process started with `--inspect=127.0.0.1:0` printed on stderr. */
export function inspectorUrl (stderr: string): string {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(stderr)?.[1]
  if (url === undefined) throw new Error(`no inspector address on stderr: ${stderr}`)
  return url
}

/**
 * Runs a full garbage collection in the inspected process, through the DevTools protocol: memory
 * read right after it is what the process retains, not the collector's headroom of the moment.
 */
export async function collectGarbage (url: string, timeoutMs = 10_000): Promise<void> {
  const socket = new WebSocket(url)
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no answer from the inspector within ${timeoutMs} ms`)), timeoutMs)
      socket.addEventListener('error', () => { clearTimeout(timer); reject(new Error('the inspector connection failed')) })
      socket.addEventListener('open', () => socket.send(JSON.stringify({ id: 1, method: 'HeapProfiler.collectGarbage' })))
      socket.addEventListener('message', (message) => {
        const reply = JSON.parse(String(message.data)) as { id?: number, error?: { message: string } }
        if (reply.id !== 1) return
        clearTimeout(timer)
        if (reply.error === undefined) resolve()
        else reject(new Error(`collectGarbage: ${reply.error.message}`))
      })
    })
  } finally {
    socket.close()
  }
}
