//go:build !race

package main

// raceEnabled: the tests run under the race detector, and so do the payoutd
// processes they start.
const raceEnabled = false
