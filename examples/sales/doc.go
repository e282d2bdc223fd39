// Command sales is a small shop-credit service over PostgreSQL: a shop owner
// records a sale on credit, and the customer's balance (total_due) goes up by
// its amount. It shows idemhttp.InTx and pgstore.Submit making POST .../sales
// safe to tap twice: the sale, the balance's move and the request's
// Idempotency-Key commit in one transaction, so two requests under one key,
// at the same moment and on any number of processes, write one sale. The
// second one's claim of the key waits on the key's unique index until the
// first commits, then answers with the first one's 201 and body, byte for
// byte, and Idempotent-Replayed: true. The balance moves by a delta in SQL
// (total_due = total_due + amount), never read, added to and written back.
//
//	go run ./examples/sales -database-url "$DATABASE_URL"   # listens on 127.0.0.1:8080
//	curl -X PUT localhost:8080/shops/dhaka-1/customers/c1
//	curl -H 'Idempotency-Key: 6f1c9a2e-0b7d-4c1e-9a55-3e2f1d0c8b4a' -d '{"customer":"c1","amount":"500.00"}' localhost:8080/shops/dhaka-1/sales
//	curl localhost:8080/shops/dhaka-1/customers/c1
//
// Flags: -addr (default 127.0.0.1:8080; the address taken is printed, so port
// 0 works), -database-url (default $DATABASE_URL), and -commit-delay, which
// keeps each sale's transaction open that long before it commits, to make a
// double tap by hand easy to land. At start it creates its tables (customers,
// sales, and the keys' table sales_keys) in the connection's current schema
// if they are not there, safely from several processes at once. SIGINT or
// SIGTERM lets the requests in flight finish, then stops it.
//
// # The HTTP API
//
// The shop is in the path, and it is the tenant of the keys: one key in two
// shops is two keys. Shop and customer ids are 1 to 64 letters, digits, '.',
// '_' and '-', starting with a letter or digit; any other id in a path is a
// 404. Errors are RFC 9457 problems (application/problem+json), but for
// net/http's own plain-text 404 and 405 for a path or method not served.
//
//	PUT  /shops/{shop}/customers/{id}  creates the customer (201), or finds it (200):
//	                                   {"shop", "id", "total_due"}
//	GET  /shops/{shop}/customers/{id}  the customer (200), or 404
//	POST /shops/{shop}/sales           with Idempotency-Key and {"customer": "c1", "amount": "500.00"}:
//	                                   201 {"id", "shop", "customer", "amount", "total_due", "created_at"},
//	                                   total_due being the customer's after this sale
//
// An amount is a JSON string of digits (at most 12) with, optionally, a point
// and one or two more, and is more than zero; amounts and balances come back
// with two decimals. A retry of a sale under its key, with the same body (as
// JSON: members in any order, any white space), gets the same 201 and body
// and writes nothing. The same key with another body, valid or not, is a 422
// urn:submissions:problem:key-reused, and writes nothing.
//
// # Which refusals use up a key
//
// None: only what the transaction commits is kept for a key, a sale and its
// 201. POST .../sales is idemhttp.InTx with writeSale as its Writer (for a
// shop id that is valid; any other is the 404 above). InTx reads the
// request's key and body, and refuses before it claims the key a missing or
// invalid Idempotency-Key (400 urn:submissions:problem:invalid-key) and a
// body over idemhttp.MaxBody (413 urn:submissions:problem:body-too-large).
// Then it claims the key and runs writeSale in the key's transaction, which
// checks the sale there: a body that is not one JSON object (400
// urn:sales:problem:malformed-body), a sale that is not valid (422
// urn:sales:problem:invalid-sale, with the fields at fault in its errors
// member) and a customer the shop does not have (404
// urn:sales:problem:unknown-customer: the UPDATE of its total_due touches no
// row). writeSale returns each of these as a *idemhttp.Problem error, which
// rolls the transaction back, the key's claim with it, and which InTx writes
// as it is. So no refusal writes anything or records anything for the key,
// and the client can fix the request, or create the customer, and send it
// again under the same key: the key stands for the sale the user meant, not
// for the first bytes that carried it. A failure of another kind inside the
// transaction (the database going away) rolls back the key with the sale
// too, and is a 5xx; a retry under the key writes the sale.
//
// The refusals are errors, not responses, because InTx keeps whatever
// response its Writer returns, a 4xx too, for the key, for ever. And they
// come after the key is claimed and compared, which has two consequences.
// A request under a key whose sale committed is answered from the key
// before the sale is checked: the same body is replayed, and any other body
// is key-reused, so a retry whose body changed into an invalid one gets 422
// key-reused, not the validation problem (either way, nothing is written).
// And a refused request holds its key until its transaction rolls back, as
// any request does until its transaction ends: another request under the
// key at that moment waits for it, then goes on as if the refused one had
// never come. The UPDATE that finds the customer also locks its row until
// the transaction ends, so the customer is there for the sale's INSERT (and
// the sale's foreign key guards it anyway).
package main
