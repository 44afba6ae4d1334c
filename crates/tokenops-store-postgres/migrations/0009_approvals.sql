-- Approval requests and their tasks. A request is raised by a policy (source POLICY, its
-- resource the operation it guards) or by hand (MANUAL); each task is one approver expression's
-- sign-off at one step. The same tables, columns and indexes as the SQLite migration, in
-- PostgreSQL types: timestamps are BIGINT microseconds since the Unix epoch (UTC); identifiers
-- are uuid. Texts a list filters on are COLLATE "C", as SQLite compares them.

-- initiator and acted_by are token subjects (a user id, or a machine client's sub) as text;
-- resource_id is text so that any resource's identifier fits.
CREATE TABLE approval_requests (
    id             uuid    NOT NULL PRIMARY KEY,
    tenant_id      uuid    NOT NULL,
    status         text    COLLATE "C" NOT NULL
                           CHECK (status IN ('PENDING', 'APPROVED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    source         text    COLLATE "C" NOT NULL CHECK (source IN ('POLICY', 'MANUAL')),
    action         text    COLLATE "C" NOT NULL,
    resource_type  text    COLLATE "C",
    resource_id    text    COLLATE "C",
    initiator      text    COLLATE "C" NOT NULL,
    title          text,
    description    text,
    expires_at     bigint  NOT NULL,
    resolved_at    bigint,
    acted_by       text    COLLATE "C",
    created_at     bigint  NOT NULL,
    updated_at     bigint  NOT NULL
);
-- The list's order (unresolved first, then resolvedAt descending) and its filters.
CREATE INDEX approval_requests_by_tenant_resolved ON approval_requests (tenant_id, resolved_at, created_at, id);
CREATE INDEX approval_requests_by_tenant_status ON approval_requests (tenant_id, status);
-- The expiry sweep: PENDING requests by deadline, across organisations.
CREATE INDEX approval_requests_pending_by_expiry ON approval_requests (expires_at) WHERE status = 'PENDING';

-- approvers is a JSON array of approver expressions (`#groupKey`, `user:<uuid>`), as text.
CREATE TABLE approval_tasks (
    id          uuid    NOT NULL PRIMARY KEY,
    tenant_id   uuid    NOT NULL,
    request_id  uuid    NOT NULL REFERENCES approval_requests (id),
    step        integer NOT NULL CHECK (step >= 0),
    approvers   text    NOT NULL,
    state       text    COLLATE "C" NOT NULL
                        CHECK (state IN ('PENDING', 'APPROVED', 'REJECTED', 'CANCELLED', 'EXPIRED')),
    acted_by    text    COLLATE "C",
    acted_at    bigint,
    comment     text,
    created_at  bigint  NOT NULL,
    updated_at  bigint  NOT NULL
);
CREATE INDEX approval_tasks_by_request ON approval_tasks (request_id, step, created_at, id);
CREATE INDEX approval_tasks_by_tenant_state ON approval_tasks (tenant_id, state, created_at, id);
