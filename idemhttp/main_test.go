package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/driver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = submissions.WithLogger(slog.New(slog.DiscardHandler))

// withdrawal is a payout service's withdrawal, as it travels in JSON.
type withdrawal struct {
	ID       string `json:"id"`
	Amount   string `json:"amount"`
	Currency string `json:"currency"`
	Address  string `json:"address"`
	Status   string `json:"status"`
	TxID     string `json:"tx_id,omitempty"`
}

func (w withdrawal) Fingerprint() submissions.Fingerprint {
	return submissions.Fingerprint{WithdrawalID: w.ID, Amount: w.Amount, Currency: w.Currency, Destination: w.Address}
}

func newWithdrawal(id string) withdrawal {
	return withdrawal{ID: id, Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"}
}

// sent is a rail that moves the money and says so.
func sent(_ context.Context, w withdrawal) (withdrawal, error) {
	w.Status, w.TxID = "sent", "0xfeed"
	return w, nil
}

// errRail is a rail's error whose text must not reach a client.
var errRail = errors.New("rail 10.0.0.7: connection reset")

// failing is a rail that gives no answer.
func failing(context.Context, withdrawal) (withdrawal, error) {
	return withdrawal{}, errRail
}

// notSending is a rail that moves nothing and says so, with err.
func notSending(err error) func(context.Context, withdrawal) (withdrawal, error) {
	return func(context.Context, withdrawal) (withdrawal, error) {
		return withdrawal{}, fmt.Errorf("%w: %w", submissions.ErrNotSent, err)
	}
}

// errStore is a store's error whose text must not reach a client.
var errStore = errors.New("store 10.0.0.9: password authentication failed")

// brokenStore is a Store whose every call fails.
type brokenStore struct{}

func (brokenStore) Claim(context.Context, string, string, driver.Fingerprint, *withdrawal) (driver.Record[withdrawal], bool, error) {
	return driver.Record[withdrawal]{}, false, errStore
}

func (brokenStore) Settle(context.Context, string, string, driver.Token, withdrawal) (driver.Record[withdrawal], bool, error) {
	return driver.Record[withdrawal]{}, false, errStore
}

func (brokenStore) Release(context.Context, string, string, driver.Token) (driver.Record[withdrawal], bool, error) {
	return driver.Record[withdrawal]{}, false, errStore
}

func (brokenStore) Lookup(context.Context, string, string) (driver.Record[withdrawal], bool, error) {
	return driver.Record[withdrawal]{}, false, errStore
}

func (brokenStore) ClaimedBy(context.Context, string, string) (string, bool, error) {
	return "", false, errStore
}
