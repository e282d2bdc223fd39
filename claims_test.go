package submissions

import "testing"

// In the memory store a record and its claim change together under one lock,
// so a claim always names the key whose record is released. The claims index
// keeps the guard of its own anyway, and this test holds it to it.
func TestClaimsReleaseOnlyTheNamedKey(t *testing.T) {
	c := claims{}
	if err := c.claim("w-1", "req-1"); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"req-2", "req-1"} {
		err := c.claim("w-1", key)
		if ce, ok := err.(*ConflictError); !ok || ce.Holder != "req-1" {
			t.Fatalf("claim by %s: got %v; want a *ConflictError naming req-1", key, err)
		}
	}
	c.release("w-1", "req-2")
	if got, ok := c.holder("w-1"); !ok || got != "req-1" {
		t.Fatalf("after a release by another key: got %q, %v; want req-1", got, ok)
	}
	c.release("w-1", "req-1")
	if got, ok := c.holder("w-1"); ok {
		t.Fatalf("after the holder's release: got %q; want no holder", got)
	}
}
