//go:build race

package testkit

// Race is true in a build with the race detector (-race), where code runs
// several times slower: single-goroutine property tests may run fewer
// cases there, since the detector finds nothing in them.
const Race = true
