package deploytest

import (
	"slices"
	"strings"
	"testing"
)

// TestCommandsFound: the readers find every tallyd command line of the
// shipped deployment files, with their configs, so the tests that parse
// them (TestDeployCommandLines, cmd/tallyd) cannot pass by reading none.
func TestCommandsFound(t *testing.T) {
	cs, err := Commands(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, c := range cs {
		if len(c.Args) == 0 {
			t.Errorf("%s: no arguments", c.Source)
			continue
		}
		kind := strings.Fields(c.Source)[0]
		count[kind+" "+c.Args[0]]++
		if c.Args[0] == "serve" {
			found := false
			for i, a := range c.Args {
				if a == "--config" && i+1 < len(c.Args) {
					_, found = c.Files[c.Args[i+1]]
				}
			}
			if !found {
				t.Errorf("%s: serve's --config is none of the files it gets (%v)", c.Source, keys(c.Files))
			}
			if len(c.Volumes) == 0 {
				t.Errorf("%s: serve without a persistent volume", c.Source)
			}
		}
		t.Logf("%s: %q env %v volumes %v ports %v files %v", c.Source, c.Args, c.Env, c.Volumes, c.Ports, keys(c.Files))
	}
	for k, n := range map[string]int{
		"deploy/compose/compose.yaml serve": 3, "deploy/compose/compose.yaml lease-authority": 1, "deploy/compose/compose.yaml dashboard": 1,
		"deploy/systemd/tallyd.service serve": 1,
		"deploy/k8s/overlays/us serve":        1, "deploy/k8s/overlays/eu serve": 1, "deploy/k8s/overlays/ap serve": 1, "deploy/k8s/overlays/us lease-authority": 1,
	} {
		if count[k] != n {
			t.Errorf("%s: %d command lines, want %d", k, count[k], n)
		}
	}
	docker := 0
	for k, n := range count {
		if strings.HasPrefix(k, "Dockerfile:") {
			docker += n
		}
	}
	if docker != 2 {
		t.Errorf("Dockerfile: %d command lines (CMD, HEALTHCHECK), want 2: %v", docker, count)
	}
}

func keys(m map[string][]byte) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}
