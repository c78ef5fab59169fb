package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DebugServer serves Go's profiler on its own listener, apart from the API
// so that it can stay on loopback while the API does not, and so that no
// API middleware (auth, body limits, request timeouts) cuts a 30 s CPU
// profile short.
type DebugServer struct {
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
}

// StartDebug listens on addr and serves /debug/pprof/ until Close.
func StartDebug(ctx context.Context, addr string, log hclog.Logger) (*DebugServer, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("debug listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	// No /debug/pprof/cmdline: the command line may hold --write-token or
	// --admin-token. Index would otherwise link it and answer it.
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "cmdline is not served: it may hold tokens", http.StatusNotFound)
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	d := &DebugServer{ln: ln, srv: &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		if err := d.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug server stopped", "error", err)
		}
	}()
	log.Info("serving /debug/pprof/", "addr", ln.Addr().String())
	return d, nil
}

// Addr is the bound address.
func (d *DebugServer) Addr() net.Addr { return d.ln.Addr() }

// Close stops the server at once: a profile in progress is cut off.
func (d *DebugServer) Close() {
	_ = d.srv.Close()
	d.wg.Wait()
}
