package natsperm

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite configs/nats/*.conf from the template")

// TestShippedConfs: the checked-in configs/nats/*.conf are what this
// package renders, so the shipped permissions and `tallyd local`'s are one
// list.
func TestShippedConfs(t *testing.T) {
	for _, r := range Shipped {
		want, err := Conf(r, Shipped)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "configs", "nats", r.Name+".conf")
		if *update {
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%s differs from internal/natsperm's rendering; run go test ./internal/natsperm -run TestShippedConfs -update", path)
		}
	}
}
