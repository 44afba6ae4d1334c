-- What a registration received before each of its latest subscription changes (event types,
-- ACTIVE/INACTIVE): an event is dispatched by the subscription in effect when it happened.
ALTER TABLE webhooks ADD COLUMN past_subscriptions jsonb NOT NULL DEFAULT '[]'::jsonb;
