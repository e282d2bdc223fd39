package idemhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/idemledger/submissions"
	"github.com/idemledger/submissions/idemhttp"
)

// A user taps "withdraw" twice; the client sends both requests under one
// Idempotency-Key. The rail is called once, and the second response is the
// first one replayed.
func Example() {
	ledger := submissions.New[withdrawal]()
	send := func(_ context.Context, w withdrawal) (withdrawal, error) {
		fmt.Println("rail: sending", w.ID)
		w.Status, w.TxID = "sent", "0xfeed"
		return w, nil
	}
	withdraw := func(w http.ResponseWriter, r *http.Request) {
		wd := withdrawal{ID: "wd-1", Amount: "25.00", Currency: "USDC", Address: "0xabc", Status: "approved"} // loaded by the service
		_, _ = idemhttp.Submit(r.Context(), w, r, ledger, http.StatusCreated, wd, send)
	}

	for range 2 {
		r := httptest.NewRequest(http.MethodPost, "/withdrawals/wd-1/send", nil)
		r.Header.Set("Idempotency-Key", `"8e03978e-40d5-43e8-bc93-6894a57f9324"`)
		rec := httptest.NewRecorder()
		withdraw(rec, r)
		fmt.Println(rec.Code, "replayed:", rec.Header().Get("Idempotent-Replayed") == "true")
		fmt.Print(rec.Body)
	}
	// Output:
	// rail: sending wd-1
	// 201 replayed: false
	// {"id":"wd-1","amount":"25.00","currency":"USDC","address":"0xabc","status":"sent","tx_id":"0xfeed"}
	// 201 replayed: true
	// {"id":"wd-1","amount":"25.00","currency":"USDC","address":"0xabc","status":"sent","tx_id":"0xfeed"}
}
