-- The audit search's `query` filter (a case-insensitive prefix of an identifier): one index per
-- identifier column in SQLite's NOCASE order (ASCII folded), so that an ASCII query reads each
-- column's range from its index; the exact pattern then checks the candidates.
CREATE INDEX audit_records_query_id ON audit_records (tenant_id, id COLLATE NOCASE);
CREATE INDEX audit_records_query_actor ON audit_records (tenant_id, actor_id COLLATE NOCASE);
CREATE INDEX audit_records_query_resource_id ON audit_records (tenant_id, resource_id COLLATE NOCASE);
CREATE INDEX audit_records_query_request ON audit_records (tenant_id, request_id COLLATE NOCASE);
CREATE INDEX audit_records_query_action ON audit_records (tenant_id, action COLLATE NOCASE);
