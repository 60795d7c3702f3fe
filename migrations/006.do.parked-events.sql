-- Platform events whose hand-off failed for a reason a retry does not change (the CRM order's data
-- conflicts with a stored order, lacks its billing order, or the CRM does not have it): set aside
-- with the reason, so that the subscription moves past them, until an operator retries or discards
-- one. One row per CRM order: a later event for the same order replaces the earlier one.
CREATE TABLE parked_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  channel text NOT NULL,
  replay_id bigint NOT NULL,
  crm_order_id text NOT NULL UNIQUE,
  event jsonb NOT NULL,
  reason text NOT NULL,
  detail text NOT NULL,
  parked_at timestamptz NOT NULL DEFAULT now(),
  retries integer NOT NULL DEFAULT 0,
  retried_at timestamptz
);
