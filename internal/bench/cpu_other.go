//go:build !unix

package bench

import "time"

// processCPU is -1: this platform's process CPU time is not read.
func processCPU() time.Duration { return -1 }
