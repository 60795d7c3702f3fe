-- The fencing token of the subscription lease under which the replay position was last written: a
-- former holder, paused past its lease, cannot write the mirror after the next holder did.
-- Existing rows take 0, below every token a lease gives.
ALTER TABLE event_replay_positions ADD COLUMN fencing_token bigint NOT NULL DEFAULT 0;
