import { UpstreamFailure, UpstreamRefusal } from '../../lib/errors.js'
import { brief } from '../upstream.js'

/** WHMCS answered the action with an error (`result: error`): it refused it, for the reason its message gives. */
export class BillingRefusal extends UpstreamFailure {
  constructor (action: string, whmcsMessage: string) {
    super('upstream_error', 'billing', `${action}: ${brief(whmcsMessage) || 'error without a message'}`)
    this.name = 'BillingRefusal'
  }
}

/**
 * AddOrder refused a payment gateway that was given or configured (`Invalid Payment Method. Valid
 * options include a,b`): the service's configuration is wrong for this WHMCS, a failure of billing
 * for every order, not a refusal of this one.
 */
export class PaymentMethodRefusedError extends UpstreamFailure {
  constructor (whmcsMessage: string) {
    super('upstream_error', 'billing', `AddOrder: ${brief(whmcsMessage)}`)
    this.name = 'PaymentMethodRefusedError'
  }
}

/**
 * AddOrder refused the gateway the client chose by itself, with no BILLING_PAYMENT_METHOD set: an
 * answer naming the valid gateways, with one of which the order is placed again. BillingClient
 * catches it: it never leaves the client.
 */
export class GatewayRefusal extends UpstreamRefusal {
  readonly validMethods: string[]

  constructor (readonly whmcsMessage: string) {
    super('billing', `AddOrder: ${brief(whmcsMessage)}`)
    this.name = 'GatewayRefusal'
    const [, listed = ''] = /valid options include\s*:?\s*(.*)$/i.exec(whmcsMessage) ?? []
    this.validMethods = listed.split(',').map(method => method.trim().replace(/\.$/, '')).filter(method => method !== '')
  }
}

/** AddOrder answered `result: error`: WHMCS refused this order (an unknown product, a closed client). */
export class OrderRefusedError extends UpstreamRefusal {
  constructor (whmcsMessage: string) {
    super('billing', `AddOrder: ${brief(whmcsMessage) || 'error without a message'}`)
    this.name = 'OrderRefusedError'
  }
}

/**
 * AcceptOrder on an order that is not pending (already accepted, cancelled) or that does not exist,
 * or CancelOrder on one accepted meanwhile: an answer about that order (a retry after a lost answer
 * meets it), not billing failing.
 */
export class OrderNotPendingError extends UpstreamRefusal {
  constructor (readonly orderId: number, action = 'AcceptOrder') {
    super('billing', `${action}: order ${orderId} not found or not pending`)
    this.name = 'OrderNotPendingError'
  }
}
