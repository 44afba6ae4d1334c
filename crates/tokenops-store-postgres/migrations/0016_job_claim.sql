-- The job claim reads due jobs in index order up to its limit, whatever the backlog: the queued
-- ones by (run_at, id) straight from this index, the expired leases from `jobs_leased`. The old
-- `jobs_due` (status, run_at) made the planner sort every due job to take the first few.
CREATE INDEX jobs_due_in_order ON jobs (status, run_at, id);
DROP INDEX jobs_due;

-- A queue churns: every job is inserted, updated two or three times and deleted when pruned.
-- Vacuum it after a fixed number of dead rows rather than a fraction of a growing table, so dead
-- index entries do not pile up under the claim's scan; leave room on each page for updates.
ALTER TABLE jobs SET (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 20000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);
