-- One Idempotency-Key, one billing order (decision 0084). A placement whose request carried a key is
-- kept, once billing took its order, for a retry with that key, which completes it.
ALTER TABLE orders
  -- Who runs the placement now (its request, or a retry that took it over), and until when: short,
  -- renewed while it lives, so that a retry takes over within seconds of its instance dying.
  ADD COLUMN placement_holder uuid,
  ADD COLUMN placement_lease_until timestamptz,
  -- A keyed placement waits for a retry with its key until then; the reconciliation then finishes
  -- or cancels it. Null: the placement had no key.
  ADD COLUMN placement_resumable_until timestamptz,
  -- A CRM create sent for it and not answered may still land until then: nobody creates another.
  ADD COLUMN crm_create_until timestamptz;
