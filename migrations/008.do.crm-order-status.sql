-- What the CRM last said of each portal order still in Pending Review, read by the reconciliation,
-- so that every instance judges the stuck orders alike. `crm_status`: the CRM order's Status when it
-- was last read (`crm_status_checked_at`), null when the CRM had no such order. `crm_approved_at`:
-- when the reconciliation first found the order approved (its Status past Pending Review) while it
-- still waited here for its platform event; cleared should the CRM take the approval back.
ALTER TABLE orders
  ADD COLUMN crm_status text,
  ADD COLUMN crm_status_checked_at timestamptz,
  ADD COLUMN crm_approved_at timestamptz;

-- An order the CRM cancels or rejects is Cancelled here.
ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders ADD CONSTRAINT orders_status_check
  CHECK (status IN ('Pending Review', 'Provisioning', 'Active', 'Failed', 'Cancelled'));

-- The orders each round asks the CRM about: those not asked for longest first.
CREATE INDEX orders_crm_status_due ON orders (crm_status_checked_at NULLS FIRST, created_at)
  WHERE status = 'Pending Review' AND crm_order_id IS NOT NULL AND provisioning_requested_at IS NULL;
