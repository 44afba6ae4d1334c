-- The requests raised for given resources (the policy simulation reads which operations a
-- policy held for approval), found by index rather than by scanning an organisation's requests.
CREATE INDEX approval_requests_by_tenant_resource ON approval_requests (tenant_id, resource_type, resource_id);
