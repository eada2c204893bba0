-- A change of a sandbox's host state (workspace growth, network switch) is claimed in one
-- short transaction, done outside any transaction, then recorded: no host tool runs while a
-- row lock is held. The claim lapses at this time, so a crash mid-change frees it.
ALTER TABLE sandboxes ADD COLUMN host_claim_until timestamptz;
