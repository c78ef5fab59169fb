package main

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/internal/cliutil"
	"github.com/tally-dev/tally/internal/deploytest"
)

// TestDeployCommandLines parses every tallyd command line of the
// deployment files (the Dockerfile's CMD and HEALTHCHECK, compose's
// commands, the systemd unit's ExecStart, the Kubernetes containers'
// args) with the command's own flag set, and every config they load with
// serve's own loader and validation, in the environment the deployment
// gives the process: a renamed flag or config field, or a secret the
// config needs and the deployment does not give, fails here rather than
// in a user's deployment. A replica's data must be on a persistent
// volume and its listener on the port the deployment publishes.
func TestDeployCommandLines(t *testing.T) {
	cs, err := deploytest.Commands(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) < 12 { // deploytest's TestCommandsFound counts them by file
		t.Fatalf("found %d tallyd command lines in deploy/", len(cs))
	}
	for _, c := range cs {
		if err := checkDeployCommand(t, c); err != nil {
			t.Errorf("%s: %q: %v", c.Source, c.Args, err)
		}
	}
}

func checkDeployCommand(t *testing.T, c deploytest.Command) error {
	dir := t.TempDir()
	args := slices.Clone(c.Args)
	for i, a := range args {
		if b, ok := c.Files[a]; ok {
			local := filepath.Join(dir, strings.ReplaceAll(strings.TrimPrefix(a, "/"), "/", "_"))
			if err := os.WriteFile(local, b, 0o600); err != nil {
				return err
			}
			args[i] = local
		}
	}
	// A secret's file (TALLY_NATS_PASSWORD_FILE) must be one the
	// deployment mounts; here it holds a made-up secret.
	for k, v := range c.EnvValues {
		if strings.HasSuffix(k, cliutil.FileSuffix) && !slices.Contains(c.SecretFiles, v) {
			return fmt.Errorf("%s=%s is no Secret key the deployment mounts (%v)", k, v, c.SecretFiles)
		}
	}
	getenv := func(k string) string {
		switch {
		case !slices.Contains(c.Env, k):
			return ""
		case strings.HasSuffix(k, cliutil.FileSuffix):
			f := filepath.Join(dir, "secret-"+k)
			if err := os.WriteFile(f, []byte("deploy-test-"+strings.ToLower(k)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
		return "deploy-test-" + strings.ToLower(k)
	}
	onPort := func(what, hostport string) error {
		if c.Ports == nil {
			return nil
		}
		_, p, err := net.SplitHostPort(hostport)
		if err != nil {
			return err
		}
		if n, _ := strconv.Atoi(p); !slices.Contains(c.Ports, n) {
			return fmt.Errorf("%s %s: port %s is not one the deployment publishes (%v)", what, hostport, p, c.Ports)
		}
		return nil
	}
	switch c.Args[0] {
	case "serve":
		cfg, err := loadConfig(args[1:], getenv, io.Discard)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(c.Volumes, func(v string) bool { return strings.HasPrefix(cfg.DataDir, strings.TrimSuffix(v, "/")+"/") }) {
			return fmt.Errorf("data_dir %q is on none of the persistent volumes %v", cfg.DataDir, c.Volumes)
		}
		return onPort("listen", cfg.Listen)
	case "healthcheck":
		hc, err := parseHealthcheck(args[1:], io.Discard)
		if err != nil {
			return err
		}
		u, err := url.Parse(hc.URL)
		if err != nil {
			return err
		}
		return onPort("--url", u.Host)
	case "lease-authority":
		cfg, _, err := parseLeaseAuthority(args[1:], getenv, io.Discard)
		if err == nil && cfg.NATSUser != "" && cfg.NATSPassword == "" {
			err = fmt.Errorf("NATS user %s without %s (or %s%s) in the environment", cfg.NATSUser, envNATSPass, envNATSPass, cliutil.FileSuffix)
		}
		return err
	case "dashboard":
		dc, err := parseDashboard(args[1:], getenv, io.Discard)
		if err != nil {
			return err
		}
		if dc.WriteToken == "" {
			return fmt.Errorf("no %s: the dashboard's likes would be refused", envWriteToken)
		}
		return onPort("--listen", dc.Listen)
	}
	return fmt.Errorf("no parser for tallyd %s here: add one", c.Args[0])
}
