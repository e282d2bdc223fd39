// Package submissions makes a payout service send each withdrawal to its
// payment rail at most once, however many times and by however many callers
// it is asked.
//
// A Submissions ledger is called around the service's own send function and
// answers two questions:
//
//   - Is this call a repeat? A request key (the client's idempotency key) maps
//     to one record: the withdrawal's Fingerprint and, once known, the
//     outcome. A repeat replays the outcome without calling send; a key
//     reused for another withdrawal is an ErrIdempotencyConflict.
//   - Is this withdrawal already someone else's? A withdrawal id maps to the
//     request key that claimed it. A second key for a claimed withdrawal is
//     refused with a *ConflictError whose Holder names that key.
//
// A send that ends without an answer (ErrOutcomeUnknown), or whose answer
// cannot be recorded (ErrOutcomeNotRecorded), leaves its key claimed, because
// an error from a rail does not prove that no money moved. The key is refused
// with ErrSubmissionInFlight until someone closes it from the rail's
// evidence: Resolve records what was found, Release says that nothing was
// sent. Only the rail's own word releases a claim at once: a send whose error
// wraps ErrNotSent. RailKey gives the rail an idempotency key of its own, the
// same on every send of a withdrawal. Every error belongs to one of three classes, told apart with
// errors.Is: refused (this call sent nothing), failed before sending
// (ErrStoreFailed), or money may have moved; docs/errors.md has the table of
// what to do after each.
//
// The claim is only as strong as the withdrawal id: it must be assigned by the
// service when the withdrawal is created, never minted by the client, and the
// ledger must be the only path to a send.
//
// Keys and claims are per tenant: Tenant returns a view of the ledger in one
// tenant, cheap to make per request. Wait blocks until a key in flight has an
// outcome. The idemhttp package serves a ledger over HTTP with the
// Idempotency-Key field.
//
// A ledger keeps its state in a store: in memory (New), where the guarantees
// hold within one process, or any driver.Store given to NewWithStore, such as
// the PostgreSQL store of the pgstore module, where they hold across every
// instance that shares it. The other doors are packages of their own: admin
// for operators (Admin: the keys in flight, reconciling them with the rail,
// pruning), driver and storetest for those who write a store, observe for
// metrics (WithObserver).
package submissions
