package main

import (
	"runtime"

	"github.com/hashicorp/go-hclog"
)

// raiseProcs raises GOMAXPROCS to min if it is lower (node.Config.MinProcs
// says why), and says so.
func raiseProcs(log hclog.Logger, min int) {
	if was := runtime.GOMAXPROCS(0); min > 1 && was < min {
		runtime.GOMAXPROCS(min)
		log.Info("GOMAXPROCS raised, so that a WAL fsync does not stall request handling (min_procs)",
			"from", was, "to", min)
	}
}
