-- A portal order's placement, step by step, so that any instance can finish or undo one that was
-- interrupted. `placement`: billing (the row exists; AddOrder may have been sent), crm (the billing
-- order is recorded; the CRM order is not), placed (linked to its CRM order), compensating (it will
-- not go on; its billing order is to be cancelled), compensated (cancelled in billing, or nothing was
-- placed). Null for orders that reached the service by a platform event.
ALTER TABLE orders
  ADD COLUMN placement text CHECK (placement IN ('billing', 'crm', 'placed', 'compensating', 'compensated')),
  -- Until then the placement belongs to whoever set it (the request, or one recovery run).
  ADD COLUMN placement_claimed_until timestamptz,
  -- The highest billing order id the service knew when AddOrder was sent: an order whose answer was
  -- lost is found among the client's newer pending orders.
  ADD COLUMN billing_floor integer,
  ADD COLUMN billing_invoice_id integer,
  ADD COLUMN billing_cancelled_at timestamptz;

-- Portal orders placed before steps were recorded: those linked to a CRM order went on; a billing
-- order whose CRM order failed is cancelled by the recovery, and one whose CRM order was never
-- linked is linked or cancelled by it.
UPDATE orders SET placement = CASE
    WHEN crm_order_id IS NOT NULL THEN 'placed'
    WHEN status = 'Failed' THEN 'compensating'
    ELSE 'crm'
  END
WHERE billing_client_id IS NOT NULL AND billing_order_id IS NOT NULL;

CREATE INDEX orders_unfinished_placement ON orders (placement_claimed_until)
  WHERE placement IN ('billing', 'crm', 'compensating');

-- Idempotency-Key of POST /api/orders: one placement per client and key until it expires.
CREATE TABLE order_idempotency_keys (
  billing_client_id integer NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  order_id uuid REFERENCES orders (id) ON DELETE SET NULL,
  response_status integer,
  response_body jsonb,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (billing_client_id, key)
);
CREATE INDEX order_idempotency_keys_expires_at ON order_idempotency_keys (expires_at);

-- One row per periodic task: the instance that moves `claimed_until` forward runs it this round.
CREATE TABLE reconciliation_leases (
  task text PRIMARY KEY,
  claimed_until timestamptz NOT NULL,
  holder text
);
