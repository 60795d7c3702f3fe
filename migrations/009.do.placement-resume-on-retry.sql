-- One Idempotency-Key, one billing order (decision 0084). A placement whose request carried a key is
-- kept for a retry with that key, which completes it from where it stopped.
ALTER TABLE orders
  -- Who runs the placement now (its request, or a retry that took it over), and until when: short,
  -- renewed while it lives, so that a retry takes over within seconds of its instance dying.
  ADD COLUMN placement_holder uuid,
  ADD COLUMN placement_lease_until timestamptz,
  -- A keyed placement waits for a retry with its key until then; the reconciliation then finishes
  -- or cancels it. Null: the placement had no key.
  ADD COLUMN placement_resumable_until timestamptz,
  -- A create sent for it and not answered (AddOrder, then the CRM create) may still land until then:
  -- nobody sends another before.
  ADD COLUMN create_landing_until timestamptz;
