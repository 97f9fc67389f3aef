-- distributor journal, schema 11. Never edit this file once landed; add a new numbered one.
-- `publish --stage` (SPEC §19) builds and verifies a release without activating it and
-- ends its operation with the terminal event `held_for_promote`. Only the views change:
-- they gain the `staged` status (a stage is finished, never unfinished: `recover` and the
-- pending-recovery checks leave it alone).

DROP VIEW takeovers;
DROP VIEW operations;

-- One row per operation with its derived status:
--   in_progress    started, commit point not reached, not rolled back (recovery due)
--   committed      commit point reached, cleanup unfinished (recovery due: roll forward)
--   applied        finished
--   failed         an error rolled it back in process
--   rolled_forward recover finished it
--   rolled_back    recover undid it
--   diverged       recover found neither pre- nor post-state (recovery due, by hand)
--   abandoned      an operator ended a diverged operation without recovering it
--   closed         recover found no staging entry: applied elsewhere or not applied
--   refused        a publication refused for its conflicts: journaled with them and no
--                  actions, finished in the same transaction
--   staged         `publish --stage` built its release and holds it for `promote`
CREATE VIEW operations AS
SELECT o.operation_id, o.started_at, o.command, o.actor, o.pipeline_id, o.destination_id,
       o.bundle_path, o.state_mode, o.decision, o.takeover_mode,
       o.previous_owner, o.previous_source_id, o.previous_source_created_at,
       o.source_id, o.source_created_at, o.source_digest,
       o.pre_state_sha256, o.post_state_sha256,
       (SELECT e.at FROM journal_events e WHERE e.operation_id = o.operation_id ORDER BY e.id DESC LIMIT 1) AS updated_at,
       CASE (SELECT e.event FROM journal_events e
              WHERE e.operation_id = o.operation_id
                AND e.event IN ('committed', 'completed', 'rolled_back', 'recovered_forward', 'recovered_back', 'diverged', 'abandoned', 'closed', 'refused', 'held_for_promote')
              ORDER BY e.id DESC LIMIT 1)
           WHEN 'completed' THEN 'applied'
           WHEN 'rolled_back' THEN 'failed'
           WHEN 'recovered_forward' THEN 'rolled_forward'
           WHEN 'recovered_back' THEN 'rolled_back'
           WHEN 'diverged' THEN 'diverged'
           WHEN 'abandoned' THEN 'abandoned'
           WHEN 'closed' THEN 'closed'
           WHEN 'refused' THEN 'refused'
           WHEN 'held_for_promote' THEN 'staged'
           WHEN 'committed' THEN 'committed'
           ELSE 'in_progress'
       END AS status
FROM journal_operations o;

-- One row per owner whose paths changed hands in a takeover (or a forced replacement of
-- another owner's content).
CREATE VIEW takeovers AS
SELECT op.operation_id, op.started_at, op.actor, op.pipeline_id, op.destination_id, op.bundle_path,
       op.decision, op.takeover_mode,
       json_extract(t.value, '$.from_owner')     AS from_owner,
       json_extract(t.value, '$.from_source_id') AS from_source_id,
       op.source_id                              AS new_source_id,
       json_extract(t.value, '$.paths')          AS paths,
       op.status
FROM operations op
JOIN journal_operations jo ON jo.operation_id = op.operation_id,
     json_each(jo.takeovers_json) t;
