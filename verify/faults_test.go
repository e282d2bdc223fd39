package verify

import (
	"context"
	"errors"

	"github.com/idemledger/submissions/driver"
)

// The stores of the checks are wrapped twice over, through the ctx of the
// calls the ledger makes of them.
//
// The Settle kinds of Send are faults of the store, not of the rail: the
// rail answers, and the store fails, or panics, as the ledger records the
// answer, having recorded it or not. A Submit carries its kind in its ctx,
// which the ledger passes to the Settle of its send; the stores of the
// checks wrap their Settle with injectSettleFault, which plays it. Every
// other call, and every Settle of another ctx (a Resolve's), is the store's
// own.
//
// A Wait that blocks (see pending) runs beside the steps after it; so that
// it has read the claim it waits for before the next step changes it, its
// ctx carries a function that the stores' Lookup and WaitClaim call (see
// noteRead), and the step waits for it.

// settleFault is the key under which a Submit's ctx carries its Send.
type settleFault struct{}

// withSettleFault returns ctx carrying send, for the store's Settle of the
// Submit's answer.
func withSettleFault(ctx context.Context, send Send) context.Context {
	return context.WithValue(ctx, settleFault{}, send)
}

// errStore is the error of a Settle that fails.
var errStore = errors.New("store: connection reset")

// storeBug is the value a Settle that panics panics with.
const storeBug = "store bug"

// injectSettleFault runs settle, a store's Settle of the answer, as the
// Send that ctx carries says: as it is, unless it is a Settle kind. A
// Settle that fails or panics having recorded nothing leaves the send
// running, as the driver.Send contract has it: the ledger abandons it.
func injectSettleFault(ctx context.Context, settle func() (driver.Record[W], bool, error)) (driver.Record[W], bool, error) {
	fault, _ := ctx.Value(settleFault{}).(Send)
	switch fault {
	case SettleFails, SettlePanics:
	case SettleFailsAfter, SettlePanicsAfter:
		_, _, _ = settle() // what it recorded, or failed to, is lost with its reply
	default:
		return settle()
	}
	if fault == SettlePanics || fault == SettlePanicsAfter {
		panic(storeBug)
	}
	return driver.Record[W]{}, false, errStore
}

// readNoted is the key under which a Wait's ctx carries the function that
// noteRead calls.
type readNoted struct{}

// withNoteRead returns ctx carrying read, for noteRead.
func withNoteRead(ctx context.Context, read func()) context.Context {
	return context.WithValue(ctx, readNoted{}, read)
}

// noteRead tells the caller of the call of ctx, if it asked, that the store
// has read a key for it: a Lookup has returned, or a WaitClaim has begun.
func noteRead(ctx context.Context) {
	if read, ok := ctx.Value(readNoted{}).(func()); ok {
		read()
	}
}

// faultyStore is a Store whose Settle plays the faults of injectSettleFault,
// and whose Lookup notes its reads (see noteRead). It has no other ability
// than a Store's: a ledger on it keeps marks of its own.
type faultyStore struct{ driver.Store[W] }

// Lookup implements driver.Store.
func (s faultyStore) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	defer noteRead(ctx)
	return s.Store.Lookup(ctx, tenant, key)
}

// Settle implements driver.Store.
func (s faultyStore) Settle(ctx context.Context, tenant, key string, token driver.Token, outcome W) (driver.Record[W], bool, error) {
	return injectSettleFault(ctx, func() (driver.Record[W], bool, error) {
		return s.Store.Settle(ctx, tenant, key, token, outcome)
	})
}

// opaque hides a store's type, so that a ledger runs it as it runs any Store:
// with marks of its own, and with the faults of faultyStore. It keeps the
// store's Abandoner, as pgstore has one: a ledger records there that its
// send ended without an answer, and so its Wait, and any other ledger's,
// returns ErrOutcomeUnknown for the claim at once. (Without one, a Wait for
// a claim whose send had ended without an answer polls the store until its
// ctx ends.)
type opaque struct {
	faultyStore
	driver.Abandoner
	driver.Answerer[W]
}

// memory is every ability of the memory store.
type memory interface {
	driver.Store[W]
	driver.Tracker[W]
	driver.Waiter[W]
	driver.Abandoner
	driver.Pruner
	driver.Lister
	driver.Replayer[W]
}

// faultyMemory is the memory store with every ability it has, a Tracker
// included, whose sends' Settles play the faults of injectSettleFault, and
// whose Lookup and WaitClaim note their reads: a ledger on it knows the
// sends of every other ledger on it, as on the memory store itself.
type faultyMemory struct{ memory }

func newFaultyMemory(st memory) *faultyMemory { return &faultyMemory{memory: st} }

// Lookup implements driver.Store.
func (f *faultyMemory) Lookup(ctx context.Context, tenant, key string) (driver.Record[W], bool, error) {
	defer noteRead(ctx)
	return f.memory.Lookup(ctx, tenant, key)
}

// WaitClaim implements driver.Waiter.
func (f *faultyMemory) WaitClaim(ctx context.Context, tenant, key string, token driver.Token) (driver.Record[W], bool, error) {
	noteRead(ctx)
	return f.memory.WaitClaim(ctx, tenant, key, token)
}

// ClaimSend implements driver.Tracker.
func (f *faultyMemory) ClaimSend(ctx context.Context, tenant, key string, fp driver.Fingerprint) (driver.Record[W], driver.Send[W], error) {
	rec, snd, err := f.memory.ClaimSend(ctx, tenant, key, fp)
	if snd != nil {
		snd = faultySend{snd}
	}
	return rec, snd, err
}

// faultySend is a send of a faultyMemory.
type faultySend struct{ driver.Send[W] }

// Settle implements driver.Send.
func (s faultySend) Settle(ctx context.Context, outcome W) (driver.Record[W], bool, error) {
	return injectSettleFault(ctx, func() (driver.Record[W], bool, error) {
		return s.Send.Settle(ctx, outcome)
	})
}
