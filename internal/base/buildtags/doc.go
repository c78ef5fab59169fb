// Package buildtags turns build tags into constants, so that code for a
// tagged build is ordinary Go behind an `if`: every build compiles, vets
// and lints it, and the untagged build's compiler removes it.
//
// The one tag is chaos (`go build -tags chaos`): the binary the chaos suite
// runs, which can inject message faults and switch on one deliberate bug so
// that the suite proves it catches it (the bugs are package failpoint's).
package buildtags
