package engine

import (
	"time"

	"github.com/idemledger/submissions/driver"
)

// AdminState is what an admin.Admin holds: that type is defined as this
// one, so that package submissions makes an Admin by converting one, and
// no constructor a service could not call shows in package admin.
type AdminState[R driver.Fingerprinter] struct {
	l            *Ledger[R]
	minRetention time.Duration // Prune refuses a horizon later than this long ago
	check        func(R) error // the service's rules for an outcome; nil for none
}

// NewAdminState returns the state of an Admin of l.
func NewAdminState[R driver.Fingerprinter](l *Ledger[R], minRetention time.Duration) *AdminState[R] {
	return &AdminState[R]{l: l, minRetention: minRetention, check: l.check}
}

// Ledger returns the ledger the Admin acts on.
func (s *AdminState[R]) Ledger() *Ledger[R] { return s.l }

// MinRetention returns the Admin's minimum retention.
func (s *AdminState[R]) MinRetention() time.Duration { return s.minRetention }

// Check returns the Admin's check of an outcome, or nil.
func (s *AdminState[R]) Check() func(R) error { return s.check }

// WithMinRetention returns a copy of s with the minimum retention d.
func (s *AdminState[R]) WithMinRetention(d time.Duration) *AdminState[R] {
	c := *s
	c.minRetention = d
	return &c
}

// WithCheck returns a copy of s whose check of an outcome is s's, then
// check.
func (s *AdminState[R]) WithCheck(check func(R) error) *AdminState[R] {
	c := *s
	if first := s.check; first != nil && check != nil {
		c.check = func(outcome R) error {
			if err := first(outcome); err != nil {
				return err
			}
			return check(outcome)
		}
	} else if check != nil {
		c.check = check
	}
	return &c
}
