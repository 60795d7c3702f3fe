-- The monitoring asks every 30 s for the oldest order still waiting for its platform event.
CREATE INDEX orders_pending_review_created_at ON orders (created_at) WHERE status = 'Pending Review';
