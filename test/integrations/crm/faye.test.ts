import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createRequire } from 'node:module'
import t from 'tap'
import { PlatformEventSubscriber } from '../../../integrations/crm/bayeux.js'
import { ORDER_PROVISION_CHANNEL } from '../../../dev/sandbox/index.js'
import { recorder } from '../../helpers/integrations.js'

// Against a real Bayeux server (Faye 1.4, no replay extension): handshake, subscribe and an event
// published through Faye's own client; then a restart of the server, which forgets every client and
// answers `401:{clientId}:Unknown client`: a new handshake with the same token, not a new token.

type Message = Record<string, unknown>
interface FayeAdapter {
  attach: (server: Server) => void
  addExtension: (extension: { incoming: (message: Message, callback: (message: Message) => void) => void }) => void
  getClient: () => { publish: (channel: string, data: unknown) => Promise<unknown>, disconnect: () => void }
  close: () => void
}
interface Faye { NodeAdapter: new (options: { mount: string, timeout: number }) => FayeAdapter }

const faye = createRequire(import.meta.url)('faye') as Faye

async function until (condition: () => boolean, what: string, timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await new Promise(resolve => setTimeout(resolve, 10))
  }
}

/** A Faye server on the loopback `port` (0: any), counting the handshakes it answers. */
async function fayeServer (port: number) {
  const adapter = new faye.NodeAdapter({ mount: '/cometd/60.0', timeout: 2 })
  const seen = { handshakes: 0 }
  adapter.addExtension({
    incoming: (message, callback) => {
      if (message.channel === '/meta/handshake') seen.handshakes++
      callback(message)
    }
  })
  const server = createServer()
  adapter.attach(server)
  await new Promise<void>(resolve => server.listen(port, '127.0.0.1', resolve))
  let publisher: ReturnType<FayeAdapter['getClient']> | undefined
  const publish = (orderId: string, replayId: number): Promise<unknown> => {
    publisher ??= adapter.getClient()
    return publisher.publish(ORDER_PROVISION_CHANNEL, { schema: 'faye', payload: { OrderId__c: orderId }, event: { replayId } })
  }
  const close = async (): Promise<void> => {
    // Faye's in-process client long polls its server for ever: it would keep the test running.
    publisher?.disconnect()
    adapter.close()
    server.closeAllConnections()
    await new Promise(resolve => server.close(resolve))
  }
  return { publish, seen, close, port: (server.address() as AddressInfo).port }
}

t.test('a Faye server: events arrive; after its restart the subscriber handshakes again with the same token', async t => {
  let server = await fayeServer(0)
  t.teardown(() => server.close())
  const instanceUrl = `http://127.0.0.1:${server.port}`
  // As the CRM client does: a token is minted when there is none, and kept until invalidated.
  let minted = 0
  let token: string | undefined
  const invalidated: string[] = []
  const received: unknown[] = []
  const recorded = recorder()
  const subscriber = new PlatformEventSubscriber({
    crm: {
      session: async () => {
        token ??= `faye-token-${++minted}`
        return { accessToken: token, instanceUrl }
      },
      invalidateSession: refused => {
        invalidated.push(refused.accessToken)
        token = undefined
      }
    },
    apiVersion: '60.0',
    channel: ORDER_PROVISION_CHANNEL,
    replayFrom: async () => -1,
    onPlatformEvents: async events => { received.push(...events.map(event => event.data.payload.OrderId__c)) },
    log: recorded.log,
    connectTimeoutMarginMs: 1000,
    backoff: { initialMs: 100, maxMs: 1000 }
  })
  const stopped = subscriber.start()
  t.teardown(async () => {
    await subscriber.stop()
    await stopped
  })

  await until(() => subscriber.stats().state === 'connected', 'the subscription')
  t.match(subscriber.stats(), { replaySupported: false, reconnects: 0 }, 'Faye grants no replay extension: degraded')
  t.ok(recorded.lines.some(line => line.level === 'warn' && line.details.replaySupported === false))
  // Faye takes the subscribe before the next long poll is held: publish once that poll is in.
  await new Promise(resolve => setTimeout(resolve, 300))
  await server.publish('801FAYE1', 1)
  await until(() => received.includes('801FAYE1'), 'the event published through Faye')

  const port = server.port
  await server.close()
  server = await fayeServer(port)
  await until(() => server.seen.handshakes > 0 && subscriber.stats().state === 'connected', 'the handshake with the restarted server')
  t.equal(minted, 1, 'no new token')
  t.same(invalidated, [], 'no session was dropped')
  t.equal(subscriber.stats().lastError, 'unknown_client')
  t.ok(subscriber.stats().reconnects >= 1)
  await new Promise(resolve => setTimeout(resolve, 300))
  await server.publish('801FAYE2', 2)
  await until(() => received.includes('801FAYE2'), 'an event after the restart')
})
