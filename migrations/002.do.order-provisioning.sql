-- Orders that reach the service by a CRM platform event may not have been placed through the
-- portal: the CRM's Product__c is text, and client and billing cycle may be unknown.
ALTER TABLE orders ALTER COLUMN product_id TYPE text USING product_id::text;
ALTER TABLE orders ALTER COLUMN billing_client_id DROP NOT NULL;
ALTER TABLE orders ALTER COLUMN billing_cycle DROP NOT NULL;

-- Each provisioning step is recorded as it completes, so a retry repeats none that did.
ALTER TABLE orders
  ADD COLUMN telecom_activation_id text,
  ADD COLUMN msisdn text,
  ADD COLUMN billing_accepted_at timestamptz,
  ADD COLUMN crm_activated_at timestamptz,
  ADD COLUMN provisioning_attempts integer NOT NULL DEFAULT 0;
