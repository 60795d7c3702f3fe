-- What Redis holds that must outlive a Redis that restarts empty or fails over to a lagging replica.

-- Every revocation until its token expires; Redis is refilled from here. The number orders them:
-- Redis keeps the highest it holds, so a Redis that went back in time is noticed.
CREATE TABLE revoked_tokens (
  jti text PRIMARY KEY,
  expires_at timestamptz NOT NULL,
  number bigint NOT NULL GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME revoked_tokens_number),
  revoked_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX revoked_tokens_expires_at ON revoked_tokens (expires_at);

-- The platform-event replay position of each channel, mirrored from Redis after each hand-off.
CREATE TABLE event_replay_positions (
  channel text PRIMARY KEY,
  replay_id bigint NOT NULL,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Set when an event hands the order to the job queue: such an order still in Pending Review has a
-- job queued, which a Redis that lost its data lost with it.
ALTER TABLE orders ADD COLUMN provisioning_requested_at timestamptz;
CREATE INDEX orders_awaiting_provisioning ON orders (crm_order_id)
  WHERE status = 'Provisioning' OR (status = 'Pending Review' AND provisioning_requested_at IS NOT NULL);
