-- Approval requests and their tasks. A request is raised by a policy (source POLICY, its
-- resource the operation it guards) or by hand (MANUAL); each task is one approver expression's
-- sign-off at one step. Timestamps are integer microseconds since the Unix epoch (UTC).

-- initiator and acted_by are token subjects (a user id, or a machine client's sub) as text;
-- resource_id is text so that any resource's identifier fits.
CREATE TABLE approval_requests (
    id             TEXT    NOT NULL PRIMARY KEY,
    tenant_id      TEXT    NOT NULL,
    status         TEXT    NOT NULL CHECK (status IN ('PENDING', 'APPROVED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    source         TEXT    NOT NULL CHECK (source IN ('POLICY', 'MANUAL')),
    action         TEXT    NOT NULL,
    resource_type  TEXT,
    resource_id    TEXT,
    initiator      TEXT    NOT NULL,
    title          TEXT,
    description    TEXT,
    expires_at     INTEGER NOT NULL,
    resolved_at    INTEGER,
    acted_by       TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL
) STRICT;
-- The list's order (unresolved first, then resolvedAt descending) and its filters.
CREATE INDEX approval_requests_by_tenant_resolved ON approval_requests (tenant_id, resolved_at, created_at, id);
CREATE INDEX approval_requests_by_tenant_status ON approval_requests (tenant_id, status);
-- The expiry sweep: PENDING requests by deadline, across organisations.
CREATE INDEX approval_requests_pending_by_expiry ON approval_requests (expires_at) WHERE status = 'PENDING';

-- approvers is a JSON array of approver expressions (`#groupKey`, `user:<uuid>`).
CREATE TABLE approval_tasks (
    id          TEXT    NOT NULL PRIMARY KEY,
    tenant_id   TEXT    NOT NULL,
    request_id  TEXT    NOT NULL REFERENCES approval_requests (id),
    step        INTEGER NOT NULL CHECK (step >= 0),
    approvers   TEXT    NOT NULL,
    state       TEXT    NOT NULL CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    acted_by    TEXT,
    acted_at    INTEGER,
    comment     TEXT,
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL
) STRICT;
CREATE INDEX approval_tasks_by_request ON approval_tasks (request_id, step, created_at, id);
CREATE INDEX approval_tasks_by_tenant_state ON approval_tasks (tenant_id, state, created_at, id);
