package resp_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/internal/base/testkit"
)

// hostileHeaders are frames an unauthenticated client can send that the
// released redcon v1.6.4 could not read safely (third_party/redcon,
// PATCHES.md): a count that outruns the bytes sent spun its reader, and a
// bulk length near MaxInt overflowed an index and panicked.
var hostileHeaders = []string{
	"*9999999999999\r\n",
	"*2147483647\r\n",
	"*9223372036854775807\r\n",
	"*3\r\n$3\r\nSET\r\n",
	"*1\r\n$9223372036854775807\r\n",
	"*2\r\n$3\r\nGET\r\n$9223372036854775806\r\nab\r\n",
}

// readAll reads every command in, as the server's reader would from a
// connection that sends in and closes, and reports how it ended.
func readAll(in []byte) ([]redcon.Command, error) {
	rd := redcon.NewReader(bytes.NewReader(in))
	var out []redcon.Command
	for {
		cmds, err := rd.ReadCommands()
		out = append(out, cmds...)
		if err != nil {
			return out, err
		}
	}
}

// Each hostile header ends its reader with the end of the stream: no
// command, no panic, no loop past the bytes sent.
func TestHostileHeaders(t *testing.T) {
	for _, h := range hostileHeaders {
		done := make(chan error, 1)
		go func() {
			defer func() {
				if r := recover(); r != nil {
					done <- errors.New("panic")
				}
			}()
			cmds, err := readAll([]byte(h))
			if len(cmds) != 0 {
				err = errors.New("read a command")
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, io.EOF) {
				t.Errorf("%q: reader ended with %v, want EOF", h, err)
			}
		case <-time.After(10 * time.Second):
			// A liveness bound, not a speed one: the reader is still
			// looping over 16 bytes.
			t.Errorf("%q: the reader did not return", h)
		}
	}
}

// Any bytes: the reader returns, never panics, and every command it reads
// is the bytes it came from, argument for argument.
func FuzzReader(f *testing.F) {
	for _, h := range hostileHeaders {
		f.Add([]byte(h))
	}
	for _, s := range []string{"PING\r\n", "*1\r\n$4\r\nPING\r\n", "*2\r\n$3\r\nGET\r\n$1\r\na\r\n*1\r\n$4\r\nPING\r\n",
		"*0\r\n", "*-1\r\n", "$3\r\nabc\r\n", "*1\r\n$-1\r\n", "*1\r\n$0\r\n\r\n", "SET \"a b\" 'c'\r\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		cmds, _ := readAll(in)
		for _, c := range cmds {
			if len(c.Args) == 0 {
				t.Fatalf("%q: a command with no arguments", in)
			}
			if c.Raw[0] == '*' {
				re, err := readAll(c.Raw)
				if !errors.Is(err, io.EOF) || len(re) != 1 || len(re[0].Args) != len(c.Args) {
					t.Fatalf("%q: command %q reads back as %d commands (%v)", in, c.Raw, len(re), err)
				}
				for i := range c.Args {
					if !bytes.Equal(re[0].Args[i], c.Args[i]) {
						t.Fatalf("%q: argument %d %q reads back as %q", in, i, c.Args[i], re[0].Args[i])
					}
				}
			}
		}
	})
}

// The 16 bytes against a real replica's RESP port: once the client has
// gone, its connection is closed and counted so (the handler left the
// parser), other clients are served, and Close returns.
func TestHostileHeaderThenDisconnect(t *testing.T) {
	n := startNode(t, nil)
	addr := n.RESPAddr().String()
	for _, h := range hostileHeaders {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write([]byte(h)); err != nil {
			t.Fatal(err)
		}
		_ = c.Close()
	}
	testkit.WaitFor(t, 20*time.Second, func() error {
		if open := respStatus(t, n).Connections; open != 0 {
			return errors.New("connections still open after their clients left")
		}
		return nil
	})
	dialPing(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := n.Close(ctx); err != nil {
		t.Fatalf("close: %v", err)
	}
}
