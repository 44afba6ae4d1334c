-- A reverted operation keeps the ledger's decoded revert (`InsufficientAvailableBalance`, a
-- revert string) beside its reasonCode, which is now the spec's EXECUTION_REVERTED for every
-- revert. Nullable: no other operation has one.
ALTER TABLE operations ADD COLUMN revert_reason TEXT;
