package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	tallynode "github.com/tally-dev/tally/node"
)

// validate checks a serve configuration (the file, the environment's
// tokens and serve's flags) the way serve does before it starts, and
// reports every problem at once, one a line, without opening anything.
func (c *cli) validate(_ context.Context, args []string) error {
	cfg, err := loadConfigAs("validate", args, c.getenv, c.stdout, fileProblems)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(c.stdout, validateHelp)
		return err
	}
	var probs *configProblems
	if errors.As(err, &probs) {
		for _, p := range probs.list {
			fmt.Fprintln(c.stderr, p)
		}
		n := fmt.Sprintf("%d problems", len(probs.list))
		if len(probs.list) == 1 {
			n = "1 problem"
		}
		return usagef("validate: %s; tallyd serve refuses this config", n)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "ok: replica %s of region %s, data in %s, listening on %s\n", cfg.Replica, cfg.Region, cfg.DataDir, cfg.Listen)
	return nil
}

// fileProblems checks that every file the config names exists and can be
// read, as serve will open them: the TLS certificate, key and client CA,
// and NATS's credentials, CA, certificate and key.
func fileProblems(cfg tallynode.Config) []string {
	var out []string
	for _, f := range []struct{ attr, path string }{
		{"tls_cert", cfg.TLSCert}, {"tls_key", cfg.TLSKey}, {"tls_client_ca", cfg.TLSClientCA},
		{"nats_creds", cfg.NATSCreds}, {"nats_ca", cfg.NATSCA}, {"nats_cert", cfg.NATSCert}, {"nats_key", cfg.NATSKey},
	} {
		if f.path == "" {
			continue
		}
		if err := readable(f.path); err != nil {
			out = append(out, fmt.Sprintf("%s %q: %v", f.attr, f.path, err))
		}
	}
	return out
}

// readable opens path and reads a byte of it: it exists, this user may
// read it, and it is a file (reading a directory fails).
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return errors.Unwrap(err) // the *PathError's reason; the caller names the path
	}
	defer f.Close()
	if _, err := f.Read(make([]byte, 1)); err != nil && !errors.Is(err, io.EOF) {
		return errors.Unwrap(err)
	}
	return nil
}

const validateHelp = `
Checks a configuration as tallyd serve would load it: the --config file
(every unknown attribute or block, wrong type and invalid value, with the
file's line where there is one), the tokens and NATS password from the
environment (TALLY_WRITE_TOKEN, TALLY_ADMIN_TOKEN, TALLY_READ_TOKEN,
TALLY_NATS_PASSWORD) and the same flags as serve, and that every file it
names (tls_cert, tls_key, tls_client_ca, nats_creds, nats_ca, nats_cert,
nats_key) exists and can be read. Prints one problem a line and exits 2,
or prints "ok: ..." and exits 0. Opens no store, port or connection.
`
