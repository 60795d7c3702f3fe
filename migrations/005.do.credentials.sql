-- Every cookie session and bearer token the service issued, until it expires: signing a client out
-- everywhere finds them here. A session is kept by the hash of its cookie, never the cookie itself.
CREATE TABLE credentials (
  id text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('session', 'token')),
  client_id bigint NOT NULL,
  issued_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL
);
CREATE INDEX credentials_client_id ON credentials (client_id, expires_at);
CREATE INDEX credentials_expires_at ON credentials (expires_at);
