import { createConnection, createServer, type AddressInfo, type Socket } from 'node:net'

// A TCP relay that holds every answer for a while before passing it on: dependencies as far away
// as across a network, for clients that would otherwise meet them on loopback.
// Settings: DELAY_MS (whole milliseconds, Node's timer resolution) and TARGET_PORTS (on 127.0.0.1,
// comma-separated). Prints one JSON line with the port it listens on for each target, and relays
// until SIGTERM.

const delayMs = Number(process.env.DELAY_MS)
const targetPorts = (process.env.TARGET_PORTS ?? '').split(',').filter(Boolean).map(Number)
if (!Number.isInteger(delayMs) || delayMs < 1 || targetPorts.length === 0 || !targetPorts.every(Number.isInteger)) {
  process.stderr.write('delay-relay: DELAY_MS must be an integer >= 1 and TARGET_PORTS a list of ports\n')
  process.exit(2)
}

/** Client bytes go on at once; answer bytes a fixed time later, in the order they came. */
function relay (client: Socket, targetPort: number): void {
  const target = createConnection(targetPort, '127.0.0.1')
  const closeBoth = () => {
    client.destroy()
    target.destroy()
  }
  for (const socket of [client, target]) {
    socket.setNoDelay(true)
    socket.on('error', closeBoth)
    socket.on('close', closeBoth)
  }
  client.on('data', (chunk: Buffer) => target.write(chunk))
  // Timers of one duration fire in the order they were set, so answers keep their order.
  target.on('data', (chunk: Buffer) => setTimeout(() => client.write(chunk), delayMs))
}

const servers = await Promise.all(targetPorts.map((targetPort) => new Promise<ReturnType<typeof createServer>>((resolve) => {
  const server = createServer((client) => relay(client, targetPort))
  server.listen(0, '127.0.0.1', () => resolve(server))
})))
const ports = Object.fromEntries(targetPorts.map((targetPort, i) => [targetPort, (servers[i]!.address() as AddressInfo).port]))
process.stdout.write(`${JSON.stringify({ message: 'Relays listening', delayMs, ports })}\n`)
process.on('SIGTERM', () => process.exit(0))
