package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/tally-dev/tally/internal/cliutil"
)

// runArgs runs `tallyd bench ...` (args start with "bench") the way tallyd
// does and returns its exit code and output.
func runArgs(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	if len(args) == 0 || args[0] != "bench" {
		t.Fatalf("runArgs wants a bench command line, got %q", args)
	}
	var out, errOut strings.Builder
	err := Run(context.Background(), args[1:], Env{Stdout: &out, Stderr: &errOut})
	var uerr *cliutil.UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.As(err, &uerr):
		code = 2
	default:
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(&errOut, "tallyd: %s\n", cliutil.OneLine(err))
	}
	return code, out.String(), errOut.String()
}

// served is a standalone replica to load.
type served struct{ addr string }

// startServe starts a standalone replica on a free port.
func startServe(t *testing.T) *served {
	t.Helper()
	return startServeWith(t, benchReplica{Durability: "fsync", EventLog: true, Windows: defaultEventsBenchConfig().Windows})
}

// startServeWith starts a standalone replica configured by rc.
func startServeWith(t *testing.T, rc benchReplica) *served {
	t.Helper()
	n, err := startBenchReplica(context.Background(), rc, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return &served{addr: n.Addr().String()}
}

// lockedBuilder is a strings.Builder safe for concurrent writers.
type lockedBuilder struct {
	mu sync.Mutex // protects b
	b  strings.Builder
}

func (l *lockedBuilder) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuilder) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
