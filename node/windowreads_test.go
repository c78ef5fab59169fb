package node

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tally-dev/tally/region"
	"github.com/tally-dev/tally/route"
	"github.com/tally-dev/tally/storage"
)

// A window or series is read alone: a request holding it with another
// read is refused whole, answered as windows (the encoding its sender
// reads), and nothing is read.
func TestWindowIsReadAlone(t *testing.T) {
	sr := &shardRouter{}
	for _, other := range []route.Op{{Kind: route.OpGet, Key: "k"}, route.WindowOp(storage.Likes, "v", 1000, 2000)} {
		req := route.Request{Kind: route.KindOps, Shard: 1, Ops: []route.Op{route.WindowOp(storage.Likes, "v", 1000, 2000), other}}
		a, ok := sr.serveOps(req, time.Now().Add(time.Second))
		if !ok || a.Kind != route.Served {
			t.Fatalf("answer %+v, %v: want served", a, ok)
		}
		ws, err := route.UnmarshalWindows(a.Body)
		if err != nil || ws.Code != "bad_request" || len(ws.Windows) != 0 {
			t.Fatalf("windows %+v, %v: want refused, bad_request", ws, err)
		}
	}
}

// A holder's no_window reads at the entry replica as region.ErrNoWindow,
// in the holder's words; its other codes as any typed read's.
func TestWindowErrorsCrossAsTheHoldersOwn(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("%w: levels of likes \"k\" are 1s kept 3h0m0s", region.ErrNoWindow),
		fmt.Errorf("%w: 10800 points, at most 10000", region.ErrInvalid),
	} {
		code, msg := windowErrCode(err), err.Error()[len("region: "):]
		back := windowCodeErr(code, msg)
		if back.Error() != err.Error() {
			t.Errorf("%v crossed as %v", err, back)
		}
		for _, sentinel := range []error{region.ErrNoWindow, region.ErrInvalid} {
			if errors.Is(back, sentinel) != errors.Is(err, sentinel) {
				t.Errorf("%v crossed as %v: errors.Is(%v) differs", err, back, sentinel)
			}
		}
	}
}
