-- The audit search's `query` filter (a case-insensitive prefix of an identifier): one index per
-- identifier column of its ASCII-folded text (`lower` under the C collation folds A-Z alone,
-- whatever the server's locale), so that an ASCII query reads each column's range from its
-- index; the exact pattern then checks the candidates.
CREATE INDEX audit_records_query_id ON audit_records (tenant_id, lower(id::text COLLATE "C"));
CREATE INDEX audit_records_query_actor ON audit_records (tenant_id, lower(actor_id::text COLLATE "C"));
CREATE INDEX audit_records_query_resource_id ON audit_records (tenant_id, lower(resource_id::text COLLATE "C"));
CREATE INDEX audit_records_query_request ON audit_records (tenant_id, lower(request_id::text COLLATE "C"));
CREATE INDEX audit_records_query_action ON audit_records (tenant_id, lower(action::text COLLATE "C"));
