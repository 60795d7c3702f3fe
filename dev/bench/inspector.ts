import { WebSocket } from 'undici'

/** The inspector address a process started with `--inspect=127.0.0.1:0` printed on stderr. */
export function inspectorUrl (stderr: string): string {
  const url = /Debugger listening on (ws:\/\/\S+)/.exec(stderr)?.[1]
  if (url === undefined) throw new Error(`no inspector address on stderr: ${stderr}`)
  return url
}

interface Reply { id?: number, result?: unknown, error?: { message: string }, method?: string, params?: unknown }

/**
 * A DevTools protocol session with a process started with `--inspect`: the memory suites collect
 * its garbage and read its heap through it, with no endpoint or signal handler in the process itself.
 */
export class InspectorSession {
  readonly #socket: WebSocket
  readonly #pending = new Map<number, { resolve: (result: unknown) => void, reject: (error: Error) => void }>()
  /** Told of every event the inspector sends (a message with a method and no id). */
  #onEvent: ((method: string, params: unknown) => void) | undefined
  #next = 1

  private constructor (socket: WebSocket) {
    this.#socket = socket
    socket.addEventListener('message', (message) => {
      const reply = JSON.parse(String(message.data)) as Reply
      if (reply.method !== undefined) this.#onEvent?.(reply.method, reply.params)
      const waiting = reply.id === undefined ? undefined : this.#pending.get(reply.id)
      if (waiting === undefined) return
      this.#pending.delete(reply.id!)
      if (reply.error === undefined) waiting.resolve(reply.result)
      else waiting.reject(new Error(reply.error.message))
    })
    socket.addEventListener('close', () => {
      for (const waiting of this.#pending.values()) waiting.reject(new Error('the inspector connection closed'))
      this.#pending.clear()
    })
  }

  static async connect (url: string, timeoutMs = 10_000): Promise<InspectorSession> {
    const socket = new WebSocket(url)
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no inspector connection within ${timeoutMs} ms`)), timeoutMs)
      socket.addEventListener('open', () => { clearTimeout(timer); resolve() })
      socket.addEventListener('error', () => { clearTimeout(timer); reject(new Error('the inspector connection failed')) })
    })
    return new InspectorSession(socket)
  }

  send (method: string, params: Record<string, unknown> = {}, timeoutMs = 30_000): Promise<unknown> {
    const id = this.#next++
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id)
        reject(new Error(`${method}: no answer from the inspector within ${timeoutMs} ms`))
      }, timeoutMs)
      this.#pending.set(id, {
        resolve: (result) => { clearTimeout(timer); resolve(result) },
        reject: (error) => { clearTimeout(timer); reject(error) }
      })
      this.#socket.send(JSON.stringify({ id, method, params }))
    })
  }

  /** A full collection, twice: what the first frees may hold the last references to more. */
  async collectGarbage (): Promise<void> {
    await this.send('HeapProfiler.collectGarbage')
    await this.send('HeapProfiler.collectGarbage')
  }

  /** `process.memoryUsage()` of the inspected process, in bytes. */
  async memoryUsage (): Promise<NodeJS.MemoryUsage> {
    const reply = await this.send('Runtime.evaluate', { expression: 'JSON.stringify(process.memoryUsage())', returnByValue: true }) as { result: { value: string } }
    return JSON.parse(reply.result.value) as NodeJS.MemoryUsage
  }

  /** A heap snapshot of the process, as the text DevTools saves (.heapsnapshot). */
  async heapSnapshot (): Promise<string> {
    const chunks: string[] = []
    this.#onEvent = (method, params) => {
      if (method === 'HeapProfiler.addHeapSnapshotChunk') chunks.push((params as { chunk: string }).chunk)
    }
    try {
      await this.send('HeapProfiler.takeHeapSnapshot', { reportProgress: false }, 300_000)
    } finally {
      this.#onEvent = undefined
    }
    return chunks.join('')
  }

  close (): void {
    this.#socket.close()
  }
}
