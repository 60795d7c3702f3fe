/* global document, location, history, fetch, crypto, EventSource, AbortController, CSS, URL, URLSearchParams, setTimeout, clearTimeout */
// The reference portal page: native browser features only. The session is an HttpOnly cookie that
// this script never sees; every call sends it (credentials: 'include'), every unsafe call carries
// the x-csrf header, and the live order status comes through a native EventSource.

const CSRF_HEADER = { 'x-csrf': '1' }
// A stream the service refused for a reason other than the session's end (too many streams, an
// instance at its limit) is asked for again, less often each time.
const STREAM_RETRY_MS = { first: 2000, max: 60_000 }
// Checked just after the session's end is due, in case no stream tells.
const SESSION_CHECK_MARGIN_MS = 1000
const ORDER = { productId: 1, billingCycle: 'monthly' }
// While the service answers 5xx or cannot be reached, it is asked again this often: the banner goes once it answers.
const RECOVERY_CHECK_MS = 3000
const SIGN_IN_ERRORS = {
  login_expired: 'The sign-in took too long, or was already used: please sign in again.',
  state_mismatch: 'The sign-in did not come back to the browser that began it: please sign in again.',
  provider_refused: 'The identity provider did not sign you in.',
  token_refused: 'The identity provider\'s answer could not be verified: please sign in again.',
  email_unverified: 'The identity provider does not vouch for your email address.',
  no_client_account: 'No billing account acts for you.',
  unavailable: 'Sign-in is unavailable for a moment: please try again.'
}
const SIGN_IN_LABELS = { password: 'password', oidc: 'identity provider' }
const END_REASONS = {
  logged_out: 'Your session was ended by a sign-out (here, in another tab or everywhere).',
  expired: 'Your session has expired.'
}

const $ = (selector) => document.querySelector(selector)

/** The service's origin: this page's by default, or `?api=http://host:port` for a page served elsewhere. */
function serviceOrigin () {
  const given = new URLSearchParams(location.search).get('api')
  if (given === null || given === '') return ''
  const url = new URL(given)
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error(`?api= must be an http(s) URL, not ${given}`)
  return url.origin
}

const API = serviceOrigin()

class ApiError extends Error {
  constructor (status, code, message, retryAfter) {
    super(message)
    this.status = status
    this.code = code
    this.retryAfter = retryAfter
  }
}

/** One call to the service; the error body's message and code when it refuses. */
async function call (method, path, body, extraHeaders = {}) {
  const headers = { accept: 'application/json', ...(method === 'GET' ? {} : CSRF_HEADER), ...extraHeaders }
  if (body !== undefined) headers['content-type'] = 'application/json'
  let response
  try {
    response = await fetch(API + path, { method, headers, credentials: 'include', body: body === undefined ? undefined : JSON.stringify(body) })
  } catch {
    throw new ApiError(0, 'UNREACHABLE', 'The service cannot be reached.')
  }
  // The service answers again, sessions checked: what said it could not is no longer true.
  if (response.status < 500) recovered()
  if (response.status === 204) return null
  const payload = await response.json().catch(() => null)
  if (!response.ok) {
    throw new ApiError(response.status, payload?.code, payload?.message ?? `HTTP ${response.status}`, response.headers.get('retry-after'))
  }
  return payload
}

// ---------------------------------------------------------------------------------------------------------------
// What is on the screen.

function element (tag, text, attributes = {}) {
  const node = document.createElement(tag)
  if (text !== undefined && text !== null) node.textContent = String(text)
  for (const [name, value] of Object.entries(attributes)) {
    if (value !== undefined && value !== null) node.setAttribute(name, value)
  }
  return node
}

/** A message above the page; `reason` names it for tests and styles. */
function say (text, reason) {
  const message = $('#message')
  message.textContent = text
  message.dataset.reason = reason
  message.hidden = false
}

function quiet () {
  const message = $('#message')
  message.hidden = true
  message.textContent = ''
  delete message.dataset.reason
}

function showState (state) {
  document.body.dataset.state = state
  $('#signed-out').hidden = state !== 'signed-out'
  $('#signed-in').hidden = state !== 'signed-in'
}

function showTime (node, iso) {
  node.dateTime = iso
  node.textContent = new Date(iso).toLocaleString()
}

function renderSession (session) {
  $('#session [data-field=clientId]').textContent = String(session.clientId)
  $('#session [data-field=name]').textContent = session.name ?? 'someone'
  $('#session [data-field=email]').textContent = session.email ?? 'no email'
  $('#session [data-field=signIn]').textContent = `signed in with the ${SIGN_IN_LABELS[session.signIn] ?? session.signIn}`
  showTime($('#session [data-field=expiresAt]'), session.expiresAt)
  showTime($('#session [data-field=idleExpiresAt]'), session.idleExpiresAt)
}

function renderInvoices (invoices) {
  $('#invoices tbody').replaceChildren(...invoices.map((invoice) => {
    const row = element('tr', undefined, { 'data-invoice-id': invoice.id, 'data-status': invoice.status })
    row.append(
      element('td', invoice.invoiceNumber),
      element('td', invoice.date ?? ''),
      element('td', invoice.dueDate ?? ''),
      element('td', `${invoice.total.toFixed(2)} ${invoice.currencyCode ?? ''}`.trim(), { class: 'num' }),
      element('td', invoice.status)
    )
    return row
  }))
  $('#invoices').dataset.loaded = 'true'
}

/** The order's row, made on first sight: a status event may come before the answer that placed it. */
function orderRow (orderId) {
  const rows = $('#orders tbody')
  let row = rows.querySelector(`tr[data-order-id="${CSS.escape(orderId)}"]`)
  if (row === null) {
    row = element('tr', undefined, { 'data-order-id': orderId })
    for (const field of ['createdAt', 'productId', 'billingCycle', 'crmOrderId', 'status']) row.append(element('td', undefined, { 'data-field': field }))
    const seen = element('td')
    seen.append(element('ol', undefined, { class: 'history' }))
    row.append(seen)
    rows.prepend(row)
  }
  return row
}

/** A status, unless the row already shows a later one. */
function setStatus (row, status, at, failureReason) {
  if (row.dataset.at !== undefined && row.dataset.at > at) return
  row.dataset.at = at
  row.dataset.status = status
  const cell = row.querySelector('[data-field=status]')
  cell.textContent = failureReason === null || failureReason === undefined ? status : `${status}: ${failureReason}`
}

/** The CRM's id of the order: the one its approval, the platform event, names. */
function showCrmOrder (row, crmOrderId) {
  if (crmOrderId === null) return
  row.dataset.crmOrderId = crmOrderId
  row.querySelector('[data-field=crmOrderId]').textContent = crmOrderId
}

function renderOrder (order) {
  const row = orderRow(order.id)
  showCrmOrder(row, order.crmOrderId)
  row.querySelector('[data-field=createdAt]').textContent = new Date(order.createdAt).toLocaleString()
  row.querySelector('[data-field=productId]').textContent = order.productId
  row.querySelector('[data-field=billingCycle]').textContent = order.billingCycle ?? ''
  setStatus(row, order.status, order.updatedAt, order.failureReason)
}

/** An `order.status` event: the row's status, and one more line in what was seen live. */
function renderStatusEvent (event) {
  const row = orderRow(event.orderId)
  showCrmOrder(row, event.crmOrderId)
  setStatus(row, event.status, event.at, event.failureReason)
  const line = element('li', `${event.status} at ${new Date(event.at).toLocaleTimeString()}`, { 'data-status': event.status })
  row.querySelector('.history').append(line)
}

// ---------------------------------------------------------------------------------------------------------------
// The session.

let sessionCheck
let stream
let streamRetry
let streamRetryMs = STREAM_RETRY_MS.first
// While this tab signs out, the end its stream announces is the one asked for: its answer says so.
let signingOut = false
// One Idempotency-Key per order the user means to place. After an answer that leaves the order
// unknown (none, a 5xx, a 409), the next click retries with the same key: the service answers the
// first placement's outcome and never places a second order.
let orderKey

function clearTimers () {
  clearTimeout(sessionCheck)
  clearTimeout(streamRetry)
}

/** Back to the sign-in form, with nothing of the session left on the page. */
function signedOut (text, reason) {
  clearTimers()
  closeStream()
  $('#invoices tbody').replaceChildren()
  $('#orders tbody').replaceChildren()
  delete $('#invoices').dataset.loaded
  orderKey = undefined
  showOrderButton()
  showState('signed-out')
  if (text === undefined) quiet()
  else say(text, reason)
}

/** A 401 from any call means the session has ended: the sign-in form, with why. Anything else is said. */
function failed (error) {
  if (error instanceof ApiError && error.status === 401) {
    signedOut('Your session has ended. Please sign in again.', 'session-ended')
    return
  }
  const wait = error.retryAfter ? ` Try again in ${error.retryAfter} s.` : ''
  // The service out of reach, or its sessions (Redis): asked again until it answers, and the banner goes.
  // Another failure (billing's, for one) stays said until the user acts again.
  const unavailable = error instanceof ApiError && (error.status === 0 || error.code === 'AUTH_UNAVAILABLE')
  say(`${error.message}${wait}`, unavailable ? 'unavailable' : 'error')
  if (unavailable) recoverLater()
}

let recovery

/** Asks the service again until it answers (which does not extend the session): then the page goes on where it was. */
function recoverLater () {
  clearTimeout(recovery)
  recovery = setTimeout(async () => {
    try {
      const session = await call('GET', '/auth/session')
      if (document.body.dataset.state === 'signed-in') {
        renderSession(session)
        if (stream === undefined) openStream()
      } else {
        await signedIn(session)
      }
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) {
        if (document.body.dataset.state === 'signed-in') failed(error)
        return
      }
      recoverLater()
    }
  }, RECOVERY_CHECK_MS)
}

/** Clears a banner that said the service could not answer. */
function recovered () {
  if ($('#message').dataset.reason !== 'unavailable') return
  clearTimeout(recovery)
  quiet()
}

/**
 * Asks when the session ends (which does not extend it), and looks again once that time has come.
 * False once the session has ended.
 */
async function checkSession () {
  let session
  try {
    session = await call('GET', '/auth/session')
  } catch (error) {
    failed(error)
    return !(error instanceof ApiError && error.status === 401)
  }
  renderSession(session)
  clearTimeout(sessionCheck)
  const due = Math.min(Date.parse(session.expiresAt), Date.parse(session.idleExpiresAt))
  sessionCheck = setTimeout(checkSession, Math.max(0, due - Date.now()) + SESSION_CHECK_MARGIN_MS)
  return true
}

async function loadInvoices () {
  const { invoices } = await call('GET', '/api/invoices')
  renderInvoices(invoices)
}

async function loadOrders () {
  const { orders } = await call('GET', '/api/orders?limit=10')
  for (const order of orders.reverse()) renderOrder(order)
}

async function signedIn (session) {
  renderSession(session)
  showState('signed-in')
  openStream()
  try {
    await Promise.all([loadInvoices(), loadOrders()])
    // The reads renewed the session: show its new idle end.
    await checkSession()
  } catch (error) {
    failed(error)
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The live order status: a native EventSource, its cookie sent across origins too (withCredentials).

function showStream (state, text, reason) {
  const badge = $('#stream')
  badge.dataset.stream = state
  badge.textContent = text
  const why = $('#stream-reason')
  why.hidden = reason === undefined
  why.textContent = reason === undefined ? '' : `Live updates are off: ${reason.message} (${reason.code}). The page asks again by itself.`
  if (reason === undefined) delete why.dataset.code
  else why.dataset.code = reason.code
}

/**
 * Why the service refused the stream: EventSource does not say, so the same request is made once
 * with fetch, whose refusal has a body (429 TOO_MANY_STREAMS: every stream this account may hold is
 * open, in other tabs). Should it be accepted meanwhile, it is closed at once. Undefined when the
 * refusal was the session's end, or no reason could be read.
 */
async function streamRefusal () {
  const asking = new AbortController()
  try {
    const response = await fetch(`${API}/api/events`, { credentials: 'include', headers: { accept: 'text/event-stream' }, signal: asking.signal })
    if (response.ok || response.status === 401) return undefined
    const body = await response.json().catch(() => null)
    return body?.code === undefined ? { code: `HTTP ${response.status}`, message: 'the service refused the stream' } : { code: body.code, message: body.message }
  } catch {
    return undefined
  } finally {
    asking.abort()
  }
}

function closeStream () {
  if (stream === undefined) return
  stream.close()
  stream = undefined
  showStream('closed', 'live updates off')
}

function openStream () {
  closeStream()
  const source = new EventSource(`${API}/api/events`, { withCredentials: true })
  stream = source
  showStream('connecting', 'connecting')
  source.addEventListener('open', () => {
    streamRetryMs = STREAM_RETRY_MS.first
    showStream('open', 'live')
  })
  source.addEventListener('order.status', (event) => renderStatusEvent(JSON.parse(event.data)))
  source.addEventListener('session.ended', (event) => {
    if (signingOut) {
      closeStream()
      return
    }
    const { reason } = JSON.parse(event.data)
    signedOut(END_REASONS[reason] ?? 'Your session has ended. Please sign in again.', 'session-ended')
  })
  // The instance is shutting down: EventSource reconnects by itself, and another instance answers.
  source.addEventListener('shutdown', () => showStream('connecting', 'reconnecting'))
  source.addEventListener('error', () => {
    if (source !== stream) return
    if (source.readyState !== EventSource.CLOSED) {
      showStream('connecting', 'reconnecting')
      return
    }
    // Refused: EventSource does not say why, and does not try again. A 401 here means the
    // session has ended, which GET /auth/session tells; otherwise the stream is asked for later.
    showStream('closed', 'live updates off')
    stream = undefined
    checkSession().then(async (live) => {
      if (!live) return
      const reason = await streamRefusal()
      if (stream === undefined && document.body.dataset.state === 'signed-in') showStream('closed', 'live updates off', reason)
      streamRetry = setTimeout(openStream, streamRetryMs)
      streamRetryMs = Math.min(streamRetryMs * 2, STREAM_RETRY_MS.max)
    })
  })
}

// ---------------------------------------------------------------------------------------------------------------
// What the user does.

async function signIn (event) {
  event.preventDefault()
  const form = event.currentTarget
  const credentials = { email: form.elements.email.value, password: form.elements.password.value }
  form.elements.password.value = ''
  try {
    const session = await call('POST', '/auth/session', credentials)
    quiet()
    await signedIn(session)
  } catch (error) {
    // 401 here is the sign-in refused (its message says why), not a session that ended.
    if (error instanceof ApiError && error.status === 401) say(error.message, 'sign-in-refused')
    else failed(error)
  }
}

async function signOut (path, text, reason) {
  signingOut = true
  let answer
  try {
    answer = await call('POST', path)
  } catch (error) {
    failed(error)
    // Still signed in (the service could not be reached): the stream, if it ended meanwhile, comes back.
    if (document.body.dataset.state === 'signed-in' && stream === undefined) openStream()
    return
  } finally {
    signingOut = false
  }
  signedOut(text, reason)
  // Signed in at the identity provider: sign out there too, on its end-session page, which sends the browser back.
  if (answer?.logoutUrl !== undefined) location.assign(answer.logoutUrl)
}

/** The person acts for several billing clients: one button each; the choice starts the session. */
async function offerClients () {
  let choice
  try {
    choice = await call('GET', '/auth/oidc/choice')
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) say('The choice of account has expired: please sign in again.', 'sign-in-refused')
    else failed(error)
    return
  }
  $('#client-choices').replaceChildren(...choice.clients.map(({ clientId, name }) => {
    const item = element('li')
    const button = element('button', `${name ?? 'Client'} (client ${clientId})`, { type: 'button', 'data-client-id': clientId })
    button.addEventListener('click', async () => {
      try {
        const session = await call('POST', '/auth/oidc/choice', { clientId })
        $('#choose-client').hidden = true
        quiet()
        await signedIn(session)
      } catch (error) {
        failed(error)
      }
    })
    item.append(button)
    return item
  }))
  $('#choose-client').hidden = false
}

function showOrderButton () {
  $('#place-order').textContent = orderKey === undefined ? 'Order product 1, monthly' : 'Retry the order'
}

async function placeOrder () {
  const button = $('#place-order')
  button.disabled = true
  orderKey ??= crypto.randomUUID()
  try {
    renderOrder(await call('POST', '/api/orders', ORDER, { 'idempotency-key': orderKey }))
    orderKey = undefined
  } catch (error) {
    if (error instanceof ApiError && error.status >= 400 && error.status < 500 && error.status !== 409) orderKey = undefined
    failed(error)
  } finally {
    showOrderButton()
    button.disabled = false
  }
}

/** Which ways of signing in the service offers: its password form, its button to the identity provider, or both. */
async function showSignInMethods () {
  const methods = await call('GET', '/auth/sign-in-methods').catch(() => ({ password: true, oidc: false }))
  $('#sign-in').hidden = !methods.password
  // The provider sends the browser back to a path of the service's own site: this page, when the service serves it.
  const oidc = methods.oidc && API === ''
  $('#sign-in-oidc').hidden = !oidc
  if (oidc) $('#sign-in-oidc-link').href = `/auth/oidc/login?returnTo=${encodeURIComponent(location.pathname)}`
}

/** What the provider's return added to the address: a failure to say, or a client to choose. Taken off the address. */
function signInReturn () {
  const query = new URLSearchParams(location.search)
  const error = query.get('signInError')
  const choose = query.get('chooseClient') === '1'
  if (error === null && !choose) return { error: null, choose: false }
  query.delete('signInError')
  query.delete('chooseClient')
  const rest = query.toString()
  history.replaceState(null, '', `${location.pathname}${rest === '' ? '' : `?${rest}`}`)
  return { error, choose }
}

$('#sign-in').addEventListener('submit', signIn)
$('#sign-out').addEventListener('click', () => signOut('/auth/logout', 'You signed out.', 'signed-out'))
$('#sign-out-everywhere').addEventListener('click', () => signOut('/auth/logout-all', 'You signed out everywhere.', 'signed-out-everywhere'))
$('#place-order').addEventListener('click', placeOrder)
$('#service').textContent = API === '' ? 'same origin' : API

// A reload keeps the user signed in: the cookie is still there, and the service says whose it is.
const returned = signInReturn()
await showSignInMethods()
call('GET', '/auth/session').then(signedIn, (error) => {
  signedOut()
  if (returned.error !== null) say(SIGN_IN_ERRORS[returned.error] ?? `Sign-in failed (${returned.error}).`, 'sign-in-refused')
  else if (!(error instanceof ApiError && error.status === 401)) failed(error)
  if (returned.choose) offerClients()
})
