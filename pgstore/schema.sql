-- One row per request key: the withdrawal it claimed, and its outcome once
-- known. Records and claims are 1:1, so the two unique constraints of one
-- table are both indexes of the ledger; the database picks the one winner of
-- a race, and the name of the violated constraint says which answer to give.
--
-- tenant scopes keys and claims (empty until tenants are used); the partial
-- indexes serve listing in-flight keys oldest first and pruning settled rows
-- in batches.
CREATE TABLE IF NOT EXISTS {{table}} (
    tenant        text        NOT NULL DEFAULT '',
    request_key   text        NOT NULL,
    withdrawal_id text        NOT NULL,
    amount        text        NOT NULL,
    currency      text        NOT NULL,
    destination   text        NOT NULL,
    outcome       bytea,
    claimed_at    timestamptz NOT NULL DEFAULT now(),
    settled_at    timestamptz,
    CONSTRAINT {{key_unique}} UNIQUE (tenant, request_key),
    CONSTRAINT {{withdrawal_unique}} UNIQUE (tenant, withdrawal_id),
    CONSTRAINT {{settled_check}} CHECK ((outcome IS NULL) = (settled_at IS NULL))
);
CREATE INDEX IF NOT EXISTS {{in_flight_index}} ON {{table}} (tenant, claimed_at) WHERE outcome IS NULL;
CREATE INDEX IF NOT EXISTS {{settled_index}} ON {{table}} (settled_at) WHERE outcome IS NOT NULL;
