package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"net/http"

	"github.com/tally-dev/tally/client"
	"github.com/tally-dev/tally/httpapi"
)

// importFile backfills a file of events (POST /v1/admin/import): the
// NDJSON of POST /v1/events with historical times, sent in batches. Each
// increment line without an idempotency_key is sent with the one the
// route would derive from it (httpapi.ImportKey), counted over the whole
// file, so that a re-run of the file, whatever its batches, changes
// nothing.
func (c *cli) importFile(ctx context.Context, args []string) error {
	var baseURL, caFile string
	batch := 5000
	timeout := time.Minute
	fs := newFlagSet("import", func(fs *flag.FlagSet) {
		fs.StringVar(&baseURL, "url", "http://localhost:8081", "the replica's HTTP `address`")
		fs.IntVar(&batch, "batch", batch, "events per request, 1.."+strconv.Itoa(httpapi.MaxBatchEvents))
		fs.StringVar(&caFile, "ca", "", "PEM `file` of the CA that signed the replica's certificate (default: the system's)")
		fs.DurationVar(&timeout, "timeout", timeout, "give up on one batch after `duration`")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, importHelp)
			return err
		}
		return usagef("import: %v (run 'tallyd import -h')", err)
	}
	switch {
	case fs.NArg() != 1:
		return usagef("import: want one FILE of events (- for stdin), got %d arguments", fs.NArg())
	case batch < 1 || batch > httpapi.MaxBatchEvents:
		return usagef("import: --batch %d: want 1..%d", batch, httpapi.MaxBatchEvents)
	case timeout <= 0:
		return usagef("import: --timeout must be positive")
	}
	in := io.Reader(os.Stdin)
	if name := fs.Arg(0); name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return usagef("import: %v", err)
		}
		defer f.Close()
		in = f
	}
	hc := &http.Client{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return usagef("import: --ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("import: --ca %s holds no PEM certificate", caFile)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	cl, err := client.New(client.Config{BaseURL: baseURL, Token: c.getenv(envAdminToken), HTTP: hc})
	if err != nil {
		return usagef("import: %v", err)
	}
	st, err := importLines(ctx, cl, in, batch, timeout, c.stderr)
	elapsed := time.Since(st.start)
	fmt.Fprintf(c.stdout, "imported %d lines in %d batches: %d applied (%d duplicates), %d rejected; %.1f s, %.0f lines/s\n",
		st.lines, st.batches, st.applied, st.duplicates, st.rejected, elapsed.Seconds(), float64(st.lines)/max(elapsed.Seconds(), 1e-9))
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	if st.rejected > 0 {
		return fmt.Errorf("import: %d lines rejected (each named on stderr)", st.rejected)
	}
	return nil
}

// importStats count what an import did.
type importStats struct {
	start                               time.Time
	lines, batches, applied, duplicates int
	rejected                            int
}

// importLines sends in's lines in batches of n and tells every rejected
// line, by its number, on errw.
func importLines(ctx context.Context, cl *client.Client, in io.Reader, n int, timeout time.Duration, errw io.Writer) (importStats, error) {
	st := importStats{start: time.Now()}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	seen := map[string]int{} // identical increment lines so far, by content
	var body []byte
	var lineNo []int // the file's line number of each line in body
	flush := func() error {
		if len(lineNo) == 0 {
			return nil
		}
		bctx, cancel := context.WithTimeout(ctx, timeout)
		res, err := cl.Import(bctx, body)
		cancel()
		if err != nil {
			return fmt.Errorf("the batch of lines %d to %d: %w (nothing after line %d was sent)", lineNo[0], lineNo[len(lineNo)-1], err, lineNo[0]-1)
		}
		st.batches++
		for i, r := range res.Results {
			switch {
			case !r.OK:
				st.rejected++
				fmt.Fprintf(errw, "line %d: %s (%s)\n", lineNo[min(i, len(lineNo)-1)], r.Error, r.Code)
			case r.Duplicate:
				st.duplicates++
				st.applied++
			default:
				st.applied++
			}
		}
		body, lineNo = body[:0], lineNo[:0]
		return nil
	}
	for no := 1; sc.Scan(); no++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		st.lines++
		body = append(body, withImportKey(line, seen)...)
		body = append(body, '\n')
		lineNo = append(lineNo, no)
		if len(lineNo) == n {
			if err := flush(); err != nil {
				return st, err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return st, err
	}
	return st, flush()
}

// withImportKey is line, with the idempotency key the route would derive
// added if it is an increment without one (the occurrence counted over
// the whole file). Any other line goes as it is; the route judges it.
func withImportKey(line []byte, seen map[string]int) []byte {
	var head struct {
		Type           string          `json:"type"`
		IdempotencyKey json.RawMessage `json:"idempotency_key"`
	}
	if line[0] != '{' || json.Unmarshal(line, &head) != nil || head.Type != "incr" || head.IdempotencyKey != nil {
		return line
	}
	k := httpapi.ImportKey(line, seen[string(line)])
	seen[string(line)]++
	out := make([]byte, 0, len(line)+len(k)+24)
	out = append(out, `{"idempotency_key":"`...)
	out = append(out, k...)
	out = append(out, '"')
	if rest := bytes.TrimSpace(line[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, line[1:]...)
}

const importHelp = `
FILE holds one event per line, the NDJSON of POST /v1/events, with their
times ("at" or "timestamp": RFC 3339, unix ms or unix seconds) however
old; a line {"videoId":"v123","userId":"u456","timestamp":1698765432}
is a like. The admin token comes from TALLY_ADMIN_TOKEN. Each event is
counted in the totals and booked in the time windows that still keep its
time. Running the same file again changes nothing (within
idempotency_ttl for increments). Budget events are refused. A rejected
line is named on stderr and the exit code is 1. See docs/api.md,
POST /v1/admin/import.
`
