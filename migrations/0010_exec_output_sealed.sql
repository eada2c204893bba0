-- Exec output kept for Idempotency-Key replays is now sealed with the organization's data
-- key. Output stored in plaintext before that cannot be opened as sealed data and must not
-- stay readable at rest: it is dropped, and a replay of such a record answers its outcome
-- with empty output marked truncated (what was kept is no longer available).
UPDATE sandbox_execs SET stdout = NULL, stderr = NULL, truncated = true
 WHERE length(coalesce(stdout, ''::bytea)) > 0 OR length(coalesce(stderr, ''::bytea)) > 0;
