-- The claim reads only queued jobs (by due time) and running ones (by lease end); finished jobs
-- stay in the table for retention and deduplication but need no place in either index. Partial
-- indexes keep them out: finishing a job no longer inserts entries into the claim's indexes
-- (the finish statement was the costliest in the store's profile under load), and the claim's
-- scans stay as small as the live queue.
CREATE INDEX jobs_queued_in_order ON jobs (run_at, id) WHERE status = 'queued';
CREATE INDEX jobs_running_by_lease ON jobs (lease_until) WHERE status = 'running';
DROP INDEX jobs_due_in_order;
DROP INDEX jobs_leased;
