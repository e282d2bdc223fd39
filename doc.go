// Package submissions makes a payout service send each withdrawal to its
// payment rail at most once, however many times and by however many callers
// it is asked.
//
// A Submissions ledger is called around the service's own send function and
// answers two different questions:
//
//   - Is this call a repeat? A request key (the client's idempotency key) maps
//     to one record: the withdrawal's Fingerprint and, once known, the
//     outcome. A repeat with the same fingerprint replays the outcome without
//     calling send; a key reused for another withdrawal is an
//     ErrIdempotencyConflict.
//   - Is this withdrawal already someone else's? A withdrawal id maps to the
//     request key that claimed it. A second key for a claimed withdrawal is
//     refused with a *ConflictError whose Holder names that key.
//
// A send that fails, panics or returns something unexpected leaves its key
// claimed with no outcome, because an error from a rail does not prove that no
// money moved. Such a key is refused with ErrSubmissionInFlight until an
// operator closes it: Resolve records what was found on the rail, Release says
// that nothing was sent.
//
// The claim is only as strong as the withdrawal id: it must be assigned by the
// service when the withdrawal is created, never minted by the client, and the
// ledger must be the only path to a send.
//
// A ledger keeps its state in a Store. New keeps it in memory, where the
// guarantees hold within one process; NewWithStore takes any other, such as
// the PostgreSQL store of the pgstore module, where they hold across every
// instance that shares it. The storetest package is the conformance suite a
// Store must pass.
package submissions
