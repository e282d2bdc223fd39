package pgstore_test

import (
	"fmt"

	"github.com/idemledger/submissions/pgstore"
)

// A team that keeps its schema with a migration tool (goose, atlas, plain
// SQL files) takes the statements Migrate would run, and never calls Migrate.
func ExampleSchema() {
	ddl, err := pgstore.Schema("payouts.submissions")
	if err != nil {
		panic(err)
	}
	fmt.Print(ddl)
	// Output:
	// -- The table of a submissions ledger (pgstore): one row per request key, a
	// -- claim of the key and of its withdrawal, with the outcome once known.
	// CREATE TABLE IF NOT EXISTS "payouts"."submissions" (
	//     tenant        text        NOT NULL DEFAULT '',
	//     request_key   text        NOT NULL,
	//     withdrawal_id text        NOT NULL,
	//     amount        text        NOT NULL,
	//     currency      text        NOT NULL,
	//     destination   text        NOT NULL,
	//     outcome       bytea,
	//     claimed_at    timestamptz NOT NULL DEFAULT now(),
	//     settled_at    timestamptz,
	//     claim_id      bigint      GENERATED ALWAYS AS IDENTITY,
	//     pruned_at     timestamptz,
	//     abandoned_at  timestamptz,
	//     CONSTRAINT "submissions_key_unique" UNIQUE (tenant, request_key),
	//     CONSTRAINT "submissions_withdrawal_unique" UNIQUE (tenant, withdrawal_id),
	//     CONSTRAINT "submissions_settled_check" CHECK ((outcome IS NULL) = (settled_at IS NULL))
	// );
	// -- A table made before claim tokens gets claim_id, a new one for each row.
	// ALTER TABLE "payouts"."submissions" ADD COLUMN IF NOT EXISTS claim_id bigint GENERATED ALWAYS AS IDENTITY;
	// -- The keys in flight, oldest first, across tenants; it replaces the index of
	// -- the keys in flight by tenant that tables made before it have.
	// CREATE INDEX IF NOT EXISTS "submissions_in_flight_age" ON "payouts"."submissions" (claimed_at, tenant COLLATE "C", request_key COLLATE "C") WHERE outcome IS NULL;
	// DROP INDEX IF EXISTS "payouts"."submissions_in_flight";
	// -- A table made before retention gets pruned_at: set on a tombstone, a row
	// -- settled and then pruned, which keeps its key and withdrawal claimed.
	// ALTER TABLE "payouts"."submissions" ADD COLUMN IF NOT EXISTS pruned_at timestamptz;
	// -- The settled rows not pruned yet, oldest first, for Prune; it replaces the
	// -- index of every settled row that tables made before it have.
	// CREATE INDEX IF NOT EXISTS "submissions_prunable" ON "payouts"."submissions" (settled_at) WHERE outcome IS NOT NULL AND pruned_at IS NULL;
	// DROP INDEX IF EXISTS "payouts"."submissions_settled";
	// -- A table made before Abandon gets abandoned_at: set on a row in flight whose
	// -- send ended without an answer, so that its waiters anywhere learn it.
	// ALTER TABLE "payouts"."submissions" ADD COLUMN IF NOT EXISTS abandoned_at timestamptz;
	// -- A table made before answers were kept gets answered_at and answer: set on
	// -- a row in flight whose send got an answer from the rail that could not be
	// -- recorded as its outcome (money moved: the row is never released), with
	// -- the answer, encoded as an outcome, when it could be kept.
	// ALTER TABLE "payouts"."submissions" ADD COLUMN IF NOT EXISTS answered_at timestamptz;
	// ALTER TABLE "payouts"."submissions" ADD COLUMN IF NOT EXISTS answer bytea;
}
