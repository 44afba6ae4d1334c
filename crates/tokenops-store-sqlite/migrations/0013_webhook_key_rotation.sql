-- JWS_ES256 delivery key rotation: a replaced key stops signing at once and stays published
-- (in the webhook JWKS) until retire_at, then is withdrawn. NULL: the key is not retiring.
ALTER TABLE webhook_signing_keys ADD COLUMN retire_at INTEGER;
