-- The span an order was placed in, as a W3C traceparent, while tracing was on: the order's later
-- work (its platform event's hand-off, its provisioning) links to it, and is kept or left out of
-- traces as the placement was. Null for orders placed with tracing off, or before this column.
ALTER TABLE orders ADD COLUMN placement_trace text;
