package node

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// scrape reads n's /metrics: every sample without labels, by name.
func scrape(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	res, err := http.Get("http://" + n.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			t.Fatalf("/metrics: %q: %v", sc.Text(), err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A replica's /metrics carries its store's state and its NATS
// connection's: up and counting traffic, down while the server is, and a
// reconnect once it is back.
func TestMetricsStoreAndNATS(t *testing.T) {
	ns := testkit.StartNATS(t, true)
	addr := ns.Addr().String()
	cfg := standalone(t.TempDir())
	cfg.NATS = "nats://" + addr
	n := startT(t, cfg)
	testkit.WaitFor(t, 30*time.Second, func() error {
		if !n.replica.Accepting() {
			return fmt.Errorf("not accepting writes")
		}
		return nil
	})
	for i := range 20 {
		if code, _ := testkit.CallJSON(t, "PUT", fmt.Sprintf("http://%s/v1/likes/post%d/alice", n.Addr(), i)); code != 200 {
			t.Fatalf("like: %d", code)
		}
	}
	m := scrape(t, n)
	for _, name := range []string{"tally_storage_disk_usage_bytes", "tally_storage_wal_written_bytes_total",
		"tally_storage_memtable_bytes", "tally_storage_filesystem_size_bytes", "tally_storage_filesystem_avail_bytes"} {
		if m[name] <= 0 {
			t.Errorf("%s = %v after 20 likes", name, m[name])
		}
	}
	if m["tally_nats_connected"] != 1 || m["tally_nats_reconnects_total"] != 0 {
		t.Errorf("connected replica: tally_nats_connected %v, reconnects %v", m["tally_nats_connected"], m["tally_nats_reconnects_total"])
	}
	for _, name := range []string{"tally_nats_out_msgs_total", "tally_nats_out_bytes_total", "tally_nats_in_msgs_total", "tally_nats_in_bytes_total"} {
		if m[name] <= 0 { // deltas and events out, its own hellos and acks in
			t.Errorf("%s = %v after 20 likes", name, m[name])
		}
	}

	ns.Shutdown()
	testkit.WaitFor(t, 10*time.Second, func() error {
		if v := scrape(t, n)["tally_nats_connected"]; v != 0 {
			return fmt.Errorf("tally_nats_connected %v with the server down", v)
		}
		return nil
	})
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	testkit.StartNATSWith(t, func(o *server.Options) { o.Port, o.JetStream, o.StoreDir = port, true, t.TempDir() })
	testkit.WaitFor(t, 30*time.Second, func() error {
		if m := scrape(t, n); m["tally_nats_connected"] != 1 || m["tally_nats_reconnects_total"] != 1 {
			return fmt.Errorf("server back: tally_nats_connected %v, reconnects %v", m["tally_nats_connected"], m["tally_nats_reconnects_total"])
		}
		return nil
	})
}
