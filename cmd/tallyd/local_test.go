package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// httpDo sends one request and decodes the JSON answer.
func httpDo(method, url, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %s: %w", method, url, raw, err)
	}
	return resp.StatusCode, out, nil
}

func poll(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// localRun is an in-process `tallyd local` with free ports and a temp dir.
type localRun struct {
	out  *lockedBuilder
	urls []string // one per region, in region order
}

// startLocal runs `tallyd local` until the test ends, then checks it exits
// cleanly. It returns once every region listens.
func startLocal(t *testing.T, args ...string) *localRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 8)
	run := &localRun{out: &lockedBuilder{}}
	c := &cli{stdout: run.out, stderr: &lockedBuilder{}, getenv: noEnv, onListen: func(a net.Addr) { addrs <- a }}
	code := make(chan int, 1)
	args = append([]string{"local", "--port", "0", "--data", t.TempDir(), "--log-level", "error"}, args...)
	go func() { code <- c.run(ctx, args) }()
	t.Cleanup(func() {
		cancel()
		select {
		case got := <-code:
			if got != 0 {
				t.Errorf("local exited %d", got)
			}
		case <-time.After(30 * time.Second):
			t.Error("local did not stop")
		}
	})
	for range 3 {
		select {
		case a := <-addrs:
			run.urls = append(run.urls, "http://"+a.String())
		case got := <-code:
			code <- got
			t.Fatalf("local exited %d: %s", got, run.out)
		case <-time.After(90 * time.Second):
			t.Fatal("local did not start")
		}
	}
	return run
}

// The README's first command, in process: three regions, likes everywhere,
// a cut link with writes on both sides, a heal, exact convergence.
func TestLocalDeploymentConvergesThroughCutAndHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three regions")
	}
	urls := startLocal(t).urls
	for _, u := range urls {
		poll(t, 30*time.Second, func() error {
			if st, _, err := httpDo("GET", u+"/readyz", ""); err != nil || st != 200 {
				return fmt.Errorf("%s not ready: %d %v", u, st, err)
			}
			return nil
		})
	}
	like := func(u, user string) {
		t.Helper()
		if st, b, err := httpDo("PUT", u+"/v1/likes/post1/"+user, ""); err != nil || st != 200 {
			t.Fatalf("like %s at %s: %d %v %v", user, u, st, b, err)
		}
	}
	countsAre := func(want float64) func() error {
		return func() error {
			for _, u := range urls {
				_, b, err := httpDo("GET", u+"/v1/likes/post1", "")
				if err != nil {
					return err
				}
				if b["count"] != want || b["approx"] != false {
					return fmt.Errorf("%s: %v, want count %v", u, b, want)
				}
				if st, _ := b["staleness_ms"].(map[string]any); len(st) != 2 {
					return fmt.Errorf("%s: staleness of 2 peers expected: %v", u, b)
				}
			}
			return nil
		}
	}
	for i, u := range urls {
		for n := range 20 {
			like(u, fmt.Sprintf("r%d-u%d", i, n))
		}
	}
	poll(t, 10*time.Second, countsAre(60))

	// Cut us-eu; both sides keep answering locally.
	if st, b, err := httpDo("PUT", urls[0]+"/v1/admin/links/us/eu", `{"up":false}`); err != nil || st != 200 || b["up"] != false {
		t.Fatalf("cut: %d %v %v", st, b, err)
	}
	for n := range 10 {
		like(urls[0], fmt.Sprintf("cut-us-%d", n))
		like(urls[1], fmt.Sprintf("cut-eu-%d", n))
		like(urls[0], fmt.Sprintf("both-%d", n))
		like(urls[1], fmt.Sprintf("both-%d", n))
	}
	if st, _, err := httpDo("PUT", urls[1]+"/v1/admin/links/eu/us", `{"up":true}`); err != nil || st != 200 {
		t.Fatalf("heal: %d %v", st, err)
	}
	poll(t, 20*time.Second, countsAre(60+10+10+10))
	poll(t, 10*time.Second, func() error {
		for _, u := range urls {
			_, b, err := httpDo("GET", u+"/v1/convergence", "")
			if err != nil {
				return err
			}
			if b["converged"] != true {
				return fmt.Errorf("%s not converged: %v", u, b)
			}
		}
		return nil
	})
}
