package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/tally-dev/tally/client"
)

// adminBackup has a running replica write a checkpoint of its store
// (POST /v1/admin/backup): Pebble runs inside the replica, so the copy is
// written on the replica's machine, into a new directory.
func (c *cli) adminBackup(ctx context.Context, args []string) error {
	var baseURL, to, caFile string
	timeout := 10 * time.Minute
	fs := newFlagSet("admin backup", func(fs *flag.FlagSet) {
		fs.StringVar(&baseURL, "url", "", "the replica's HTTP `address`, e.g. https://us-1.tally.internal:8080 (required)")
		fs.StringVar(&to, "to", "", "new `directory` on the replica's machine, absolute, to write the backup into (required)")
		fs.StringVar(&caFile, "ca", "", "PEM `file` of the CA that signed the replica's certificate (default: the system's)")
		fs.DurationVar(&timeout, "timeout", timeout, "give up after `duration`")
	})
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(c.stdout, fs)
			fmt.Fprint(c.stdout, backupHelp)
			return err
		}
		return usagef("admin backup: %v (run 'tallyd admin backup -h')", err)
	}
	switch {
	case fs.NArg() > 0:
		return usagef("admin backup: unexpected argument %q", fs.Arg(0))
	case baseURL == "":
		return usagef("admin backup: --url is required: the replica to back up")
	case to == "":
		return usagef("admin backup: --to is required: a new directory on the replica's machine")
	case timeout <= 0:
		return usagef("admin backup: --timeout must be positive")
	}
	hc := &http.Client{}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return usagef("admin backup: --ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usagef("admin backup: --ca %s holds no PEM certificate", caFile)
		}
		hc.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	}
	cl, err := client.New(client.Config{BaseURL: baseURL, Token: c.getenv(envAdminToken), HTTP: hc})
	if err != nil {
		return usagef("admin backup: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	b, err := cl.Backup(ctx, to)
	if err != nil {
		return fmt.Errorf("admin backup: %w", err)
	}
	fmt.Fprintf(c.stdout, "backup of %s (region %s) taken at %s: %s on the replica's machine, %d files, %d bytes\n",
		b.Replica, b.Region, b.TakenAt, b.Dir, b.Files, b.Bytes)
	return nil
}

const backupHelp = `
The admin token comes from TALLY_ADMIN_TOKEN. The replica goes on serving
while it writes the backup; the directory must not exist, and its parent
must. To restore: stop the replica, replace its data_dir with the backup,
start it; it holds writes until it has synced from every peer. See
docs/operations.md, "Backup and restore".
`
