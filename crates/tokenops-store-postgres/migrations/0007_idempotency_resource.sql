-- The resource a completed write named (the id its audit record carries), so that a replay hands
-- it back without reading it out of a stored header. NULL for records completed before this
-- migration and for writes that named no resource. Text, as the audit record's resource id is:
-- not every resource is named by a UUID.
ALTER TABLE idempotency_records ADD COLUMN resource_id text;
