import { get, type ClientRequest } from 'node:http'

export interface SseEvent { id?: string, event?: string, data?: string }

/** A minimal EventSource over node:http: collects the frames a stream sends. */
export class SseClient {
  readonly events: SseEvent[] = []
  comments = 0
  status = 0
  ended = false
  #request: ClientRequest | undefined
  #buffer = ''

  static open (url: string, headers: Record<string, string>): Promise<SseClient> {
    const client = new SseClient()
    return new Promise((resolve, reject) => {
      client.#request = get(url, { headers: { accept: 'text/event-stream', ...headers } }, (response) => {
        client.status = response.statusCode ?? 0
        response.setEncoding('utf8')
        response.on('data', (chunk: string) => client.#read(chunk))
        response.on('end', () => { client.ended = true })
        resolve(client)
      })
      client.#request.on('error', reject)
    })
  }

  close (): void {
    this.#request?.destroy()
  }

  #read (chunk: string): void {
    this.#buffer += chunk
    let end: number
    while ((end = this.#buffer.indexOf('\n\n')) !== -1) {
      const frame = this.#buffer.slice(0, end)
      this.#buffer = this.#buffer.slice(end + 2)
      const event: SseEvent = {}
      for (const line of frame.split('\n')) {
        if (line.startsWith(':')) this.comments++
        const [field, ...rest] = line.split(': ')
        if (field === 'id' || field === 'event' || field === 'data') event[field] = rest.join(': ')
      }
      if (event.data !== undefined) this.events.push(event)
    }
  }
}
