package deploytest

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tally-dev/tally/internal/cliutil"
	tallynode "github.com/tally-dev/tally/node"
)

// stopNeeds is how long a replica with this config may take to stop on
// SIGTERM: the drain, the in-flight requests, and a margin to close
// replication and the store.
func stopNeeds(t *testing.T, hcl []byte) time.Duration {
	t.Helper()
	f := filepath.Join(t.TempDir(), "tallyd.hcl")
	if err := os.WriteFile(f, hcl, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := tallynode.DefaultConfig()
	if err := cliutil.DecodeHCLFile(f, &cfg); err != nil {
		t.Fatal(err)
	}
	drain, err1 := time.ParseDuration(cfg.DrainDelay)
	shut, err2 := time.ParseDuration(cfg.ShutdownTimeout)
	if err1 != nil || err2 != nil {
		t.Fatalf("drain_delay %q, shutdown_timeout %q", cfg.DrainDelay, cfg.ShutdownTimeout)
	}
	return drain + shut + 5*time.Second
}

// TestSystemdUnit checks deploy/systemd/tallyd.service with
// systemd-analyze verify (any warning fails), with ExecStart's binary
// standing in for the one the unit installs, and checks that it stops
// the way tallyd drains: SIGTERM to the main process only, SIGKILL only
// after the drain and shutdown of the config it installs.
func TestSystemdUnit(t *testing.T) {
	file := filepath.Join(repoRoot, "deploy", "systemd", "tallyd.service")
	u, err := ReadUnit(file)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{
		"User": "tally", "KillSignal": "SIGTERM", "KillMode": "mixed", "StateDirectory": "tally",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"ExecReload": "/bin/kill -HUP $MAINPID",
	} {
		if got := u.Values("Service", key); !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%q, want %q", key, got, want)
		}
	}
	cs, err := systemdCommands(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	grace, err := time.ParseDuration(strings.Join(u.Values("Service", "TimeoutStopSec"), ""))
	if err != nil {
		t.Fatalf("TimeoutStopSec: %v", err)
	}
	for _, b := range cs[0].Files {
		if need := stopNeeds(t, b); grace < need {
			t.Errorf("TimeoutStopSec=%s, but the config drains and shuts down for up to %s", grace, need)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed (Debian package systemd): the unit is not verified")
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// verify refuses an ExecStart binary that does not exist; the unit's
	// /usr/local/bin/tallyd is installed only on the target machine.
	unit := filepath.Join(t.TempDir(), "tallyd.service")
	if err := os.WriteFile(unit, []byte(strings.ReplaceAll(string(raw), imageBinary, self)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", "--man=no", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify %s: %v\n%s", file, err, out)
	}
}

var update = flag.Bool("update", false, "copy configs/nats/<region>.conf to deploy/k8s/overlays/<region>/nats.conf")

// TestK8sManifests: each region's nats-server ConfigMap is the shipped
// configs/nats/<region>.conf byte for byte (`go test
// ./internal/deploytest -run TestK8sManifests -update` copies it into
// the region's overlay), and the tally pods get the probes, the drain
// and the grace period tallyd needs.
func TestK8sManifests(t *testing.T) {
	overlays, err := k8sOverlays(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range overlays {
		r := filepath.Base(dir)
		shipped, err := os.ReadFile(filepath.Join(repoRoot, "configs", "nats", r+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(filepath.Join(dir, "nats.conf"), shipped, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		rendered, err := Kustomize(dir)
		if err != nil {
			t.Fatal(err)
		}
		var natsConf string
		hcl := map[string]string{}
		for _, o := range rendered {
			var cm k8sObject
			if err := o.Decode(&cm); err != nil {
				t.Fatal(err)
			}
			switch {
			case o.Kind() == "ConfigMap" && o.Name() == "nats-config":
				natsConf = cm.Data["nats.conf"]
			case o.Kind() == "ConfigMap" && o.Name() == "tallyd-config":
				hcl = cm.Data
			}
		}
		if natsConf != string(shipped) {
			t.Errorf("%s: ConfigMap nats-config differs from configs/nats/%s.conf: copy it again", dir, r)
		}
		if len(hcl) == 0 {
			t.Errorf("%s: no tallyd-config", dir)
		}
		// The pod's stop: preStop, then SIGTERM and tallyd's own drain.
		var pod struct {
			Kind string `yaml:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Grace      int `yaml:"terminationGracePeriodSeconds"`
						Containers []struct {
							Image     string `yaml:"image"`
							Readiness struct {
								HTTPGet struct{ Path string } `yaml:"httpGet"`
							} `yaml:"readinessProbe"`
							Liveness struct {
								HTTPGet struct{ Path string } `yaml:"httpGet"`
							} `yaml:"livenessProbe"`
							Lifecycle struct {
								PreStop struct {
									Sleep struct{ Seconds int } `yaml:"sleep"`
								} `yaml:"preStop"`
							} `yaml:"lifecycle"`
						} `yaml:"containers"`
						Affinity struct {
							PodAntiAffinity map[string]any `yaml:"podAntiAffinity"`
						} `yaml:"affinity"`
					} `yaml:"spec"`
				} `yaml:"template"`
			} `yaml:"spec"`
		}
		found := false
		for _, o := range rendered {
			if err := o.Decode(&pod); err != nil {
				t.Fatal(err)
			}
			if pod.Kind != "StatefulSet" || len(pod.Spec.Template.Spec.Containers) == 0 || !strings.HasPrefix(pod.Spec.Template.Spec.Containers[0].Image, "tally:") {
				continue
			}
			found = true
			ps := pod.Spec.Template.Spec
			c := ps.Containers[0]
			if c.Readiness.HTTPGet.Path != "/readyz" || c.Liveness.HTTPGet.Path != "/healthz" {
				t.Errorf("%s: readiness %q, liveness %q, want /readyz and /healthz", dir, c.Readiness.HTTPGet.Path, c.Liveness.HTTPGet.Path)
			}
			if ps.Affinity.PodAntiAffinity == nil {
				t.Errorf("%s: no podAntiAffinity", dir)
			}
			for name, cfg := range hcl {
				need := time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second + stopNeeds(t, []byte(cfg))
				if c.Lifecycle.PreStop.Sleep.Seconds == 0 || time.Duration(ps.Grace)*time.Second < need {
					t.Errorf("%s: %s: preStop sleep %ds, grace %ds: want a preStop and a grace of at least %s", dir, name, c.Lifecycle.PreStop.Sleep.Seconds, ps.Grace, need)
				}
			}
		}
		if !found {
			t.Errorf("%s: no tally StatefulSet", dir)
		}
	}
}

// TestCompose runs deploy/compose/setup.sh into a temporary directory and
// checks what compose.yaml needs of it: every ${VAR} it reads is in the
// .env setup.sh writes; every $VAR a region's shipped nats config reads
// is in that nats-server's environment; and each region's certificate is
// signed by the CA, valid for the names the shipped config routes and
// gateways to, as server and as client (routes and gateways are mutual
// TLS). Its tallyd services stop no sooner than they drain.
func TestCompose(t *testing.T) {
	dir := filepath.Join(repoRoot, "deploy", "compose")
	raw, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed (Debian package openssl): setup.sh cannot run")
	}
	out := t.TempDir()
	if b, err := exec.Command("bash", filepath.Join(dir, "setup.sh"), out).CombinedOutput(); err != nil {
		t.Fatalf("setup.sh: %v\n%s", err, b)
	}
	envFile, err := os.ReadFile(filepath.Join(out, ".env"))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(string(envFile), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			if len(v) < 16 {
				t.Errorf(".env: %s is %q: want a random secret", k, v)
			}
			env[k] = v
		}
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_0-9]+)`).FindAllStringSubmatch(string(raw), -1) {
		if env[m[1]] == "" {
			t.Errorf("compose.yaml reads ${%s}, which setup.sh does not write", m[1])
		}
	}

	var doc struct {
		Services map[string]struct {
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			Build       any               `yaml:"build"`
			Command     []string          `yaml:"command"`
			StopGrace   string            `yaml:"stop_grace_period"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	ca := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(out, "secrets", "ca.pem"))
	if err != nil || !ca.AppendCertsFromPEM(caPEM) {
		t.Fatalf("secrets/ca.pem: %v", err)
	}
	for _, r := range []string{"us", "eu", "ap"} {
		svc, ok := doc.Services["nats-"+r]
		if !ok {
			t.Errorf("no service nats-%s", r)
			continue
		}
		conf, err := os.ReadFile(filepath.Join(repoRoot, "configs", "nats", r+".conf"))
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(svc.Volumes, fmt.Sprintf("../../configs/nats/%s.conf:/etc/nats/nats.conf:ro", r)) {
			t.Errorf("nats-%s does not run on configs/nats/%s.conf: %v", r, r, svc.Volumes)
		}
		// Variables are $NAME outside comments and quoted strings (NATS
		// does not expand inside strings: "$JS.API..." is a subject).
		uncommented := regexp.MustCompile(`(?m)#.*$|"[^"\n]*"`).ReplaceAllString(string(conf), "")
		for _, m := range regexp.MustCompile(`\$([A-Z_0-9]+)`).FindAllStringSubmatch(uncommented, -1) {
			if _, ok := svc.Environment[m[1]]; !ok {
				t.Errorf("configs/nats/%s.conf reads $%s, which service nats-%s does not set", r, m[1], r)
			}
		}
		pair, err := tls.LoadX509KeyPair(filepath.Join(out, "secrets", "nats-"+r+".pem"), filepath.Join(out, "secrets", "nats-"+r+"-key.pem"))
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, host := range []string{"nats-a", "nats-b", "nats-c"} {
			for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
				if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host + "." + r + ".tally.internal", Roots: ca, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
					t.Errorf("nats-%s.pem for %s.%s.tally.internal (usage %v): %v", r, host, r, usage, err)
				}
			}
		}
	}
	for name, svc := range doc.Services {
		if svc.Build == nil || len(svc.Command) == 0 || svc.Command[0] != "serve" {
			continue
		}
		hcl, err := os.ReadFile(filepath.Join(dir, strings.TrimPrefix(name, "tallyd-")+".hcl"))
		if err != nil {
			t.Fatal(err)
		}
		grace, err := time.ParseDuration(svc.StopGrace)
		if need := stopNeeds(t, hcl); err != nil || grace < need {
			t.Errorf("service %s: stop_grace_period %q, want at least %s", name, svc.StopGrace, need)
		}
	}
	if b, err := exec.Command("bash", filepath.Join(dir, "setup.sh"), out).CombinedOutput(); err == nil {
		t.Errorf("setup.sh ran again over an existing .env: %s", b)
	}
}
