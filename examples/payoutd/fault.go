package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// faultEnv names the environment variable that makes payoutd kill itself,
// with SIGKILL, at one step of a send: a fault point for the crash tests
// (crash_test.go), never for production. Unset or empty, it does nothing.
const faultEnv = "PAYOUTD_FAULT"

// The steps of a send that PAYOUTD_FAULT names, in their order.
const (
	faultClaimed      = "claimed"       // in the Claimed hook, its write made, before the claim's transaction commits
	faultBeforeRail   = "before-rail"   // the claim committed, before the rail is called
	faultRailMoved    = "rail-moved"    // the rail moved the money and recorded it, before it answers
	faultSettled      = "settled"       // in the Settled hook, its write made, before the outcome's transaction commits
	faultBeforeAnswer = "before-answer" // the outcome committed, before the HTTP answer
	faultReleased     = "released"      // in the Released hook (the rail moved nothing), before the release's transaction commits
)

// faultSteps are the steps, in order.
var faultSteps = []string{faultClaimed, faultBeforeRail, faultRailMoved, faultSettled, faultBeforeAnswer, faultReleased}

// A fault is the step at which the process kills itself; "" is none.
type fault string

// parseFault reads PAYOUTD_FAULT's value; a step it does not know is an
// error, so that a mistyped one does not let a crash test pass unkilled.
func parseFault(v string) (fault, error) {
	if v != "" && !slices.Contains(faultSteps, v) {
		return "", fmt.Errorf("%s=%q is not a step: one of %s", faultEnv, v, strings.Join(faultSteps, ", "))
	}
	return fault(v), nil
}

// at kills the process with SIGKILL if f is step, saying so on stderr first:
// nothing after it runs, no deferred call, no commit, no answer.
func (f fault) at(step string) {
	if f == "" || string(f) != step {
		return
	}
	fmt.Fprintf(os.Stderr, "payoutd: %s=%s: killed here\n", faultEnv, step)
	if p, err := os.FindProcess(os.Getpid()); err == nil {
		_ = p.Kill()
	}
	time.Sleep(time.Minute) // the signal is on its way; nothing of this goroutine goes on
	os.Exit(137)
}
