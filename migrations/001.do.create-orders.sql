CREATE TABLE orders (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  billing_client_id integer NOT NULL,
  product_id integer NOT NULL,
  billing_cycle text NOT NULL,
  billing_order_id integer UNIQUE,
  crm_order_id text UNIQUE,
  status text NOT NULL DEFAULT 'Pending Review'
    CHECK (status IN ('Pending Review', 'Provisioning', 'Active', 'Failed')),
  failure_reason text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX orders_billing_client_id_idx ON orders (billing_client_id, created_at DESC);
