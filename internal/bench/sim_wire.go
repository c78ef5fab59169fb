package bench

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/tally-dev/tally/replication"
)

// wireCounter counts what the replicas' transports carry, in bytes of
// message payload (what a NATS message's data would be; NATS adds its
// own framing, about the subject's length and 20 bytes more).
type wireCounter struct {
	// The fast path: deltas and heartbeats. Published counts each
	// message once, as it goes to the bus; Delivered counts it once per
	// other replica that receives it, as it leaves the bus.
	published, publishedMsgs atomic.Int64
	delivered, deliveredMsgs atomic.Int64
	// Anti-entropy: requests and their replies, digest exchanges apart
	// from segment pages (and the rest: history).
	digests, digestMsgs atomic.Int64
	pages, pageMsgs     atomic.Int64
	other               atomic.Int64
	// The page bytes by what was asked: part digests both ways, diff
	// requests (the hashes the asker holds), their answers, and
	// whole-segment pages both ways.
	parts, diffAsks, diffPages, whole atomic.Int64
}

// wireBytes is a snapshot of a wireCounter, or the difference of two.
type wireBytes struct {
	Published     int64 `json:"published_bytes"`
	PublishedMsgs int64 `json:"published_msgs"`
	Delivered     int64 `json:"delivered_bytes"`
	DeliveredMsgs int64 `json:"delivered_msgs"`
	Digests       int64 `json:"ae_digest_bytes"`
	DigestMsgs    int64 `json:"ae_digest_exchanges"`
	Pages         int64 `json:"ae_page_bytes"`
	PageMsgs      int64 `json:"ae_page_exchanges"`
	Other         int64 `json:"ae_other_bytes"`
	PageParts     int64 `json:"ae_page_parts_bytes"`
	PageDiffAsks  int64 `json:"ae_page_diff_request_bytes"`
	PageDiffs     int64 `json:"ae_page_diff_answer_bytes"`
	PageWhole     int64 `json:"ae_page_whole_bytes"`
}

func (c *wireCounter) snapshot() wireBytes {
	return wireBytes{
		Published: c.published.Load(), PublishedMsgs: c.publishedMsgs.Load(),
		Delivered: c.delivered.Load(), DeliveredMsgs: c.deliveredMsgs.Load(),
		Digests: c.digests.Load(), DigestMsgs: c.digestMsgs.Load(),
		Pages: c.pages.Load(), PageMsgs: c.pageMsgs.Load(), Other: c.other.Load(),
		PageParts: c.parts.Load(), PageDiffAsks: c.diffAsks.Load(), PageDiffs: c.diffPages.Load(), PageWhole: c.whole.Load(),
	}
}

// since is w minus an earlier snapshot.
func (w wireBytes) since(o wireBytes) wireBytes {
	return wireBytes{
		Published: w.Published - o.Published, PublishedMsgs: w.PublishedMsgs - o.PublishedMsgs,
		Delivered: w.Delivered - o.Delivered, DeliveredMsgs: w.DeliveredMsgs - o.DeliveredMsgs,
		Digests: w.Digests - o.Digests, DigestMsgs: w.DigestMsgs - o.DigestMsgs,
		Pages: w.Pages - o.Pages, PageMsgs: w.PageMsgs - o.PageMsgs, Other: w.Other - o.Other,
		PageParts: w.PageParts - o.PageParts, PageDiffAsks: w.PageDiffAsks - o.PageDiffAsks,
		PageDiffs: w.PageDiffs - o.PageDiffs, PageWhole: w.PageWhole - o.PageWhole,
	}
}

// AE is every anti-entropy byte, both ways.
func (w wireBytes) AE() int64 { return w.Digests + w.Pages + w.Other }

// total is every byte that crossed between replicas: the fast path as
// delivered, and anti-entropy.
func (w wireBytes) total() int64 { return w.Delivered + w.AE() }

// countingTransport is one replica's transport, counted into c. Its own
// messages coming back to it (a replica subscribes to every replica's
// heartbeat subject, its own included) are not counted as delivered:
// NATS would not send them over the wire to another machine either.
type countingTransport struct {
	inner replication.Transport
	own   string // the replica's own delta subject
	c     *wireCounter
}

func (t *countingTransport) Publish(subject string, data []byte) error {
	t.c.published.Add(int64(len(data)))
	t.c.publishedMsgs.Add(1)
	return t.inner.Publish(subject, data)
}

func (t *countingTransport) Subscribe(subject string, h func(string, []byte)) (func() error, error) {
	return t.inner.Subscribe(subject, func(subject string, data []byte) {
		if subject != t.own && !strings.HasPrefix(subject, t.own+".") {
			t.c.delivered.Add(int64(len(data)))
			t.c.deliveredMsgs.Add(1)
		}
		h(subject, data)
	})
}

func (t *countingTransport) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	reply, err := t.inner.Request(ctx, subject, data)
	n := int64(len(data) + len(reply))
	switch {
	case strings.HasSuffix(subject, ".digests"):
		t.c.digests.Add(n)
		t.c.digestMsgs.Add(1)
	case strings.HasSuffix(subject, ".page"):
		t.c.pages.Add(n)
		t.c.pageMsgs.Add(1)
		switch {
		case isPartsRequest(data):
			t.c.parts.Add(n)
		case isDiffRequest(data):
			t.c.diffAsks.Add(int64(len(data)))
			t.c.diffPages.Add(int64(len(reply)))
		default:
			t.c.whole.Add(n)
		}
	default:
		t.c.other.Add(n)
	}
	return reply, err
}

func (t *countingTransport) Respond(subject string, h func([]byte) []byte) (func() error, error) {
	return t.inner.Respond(subject, h)
}

// isPartsRequest and isDiffRequest tell what a request on the page
// subject asks for by decoding it, so the count works at any commit
// that has the messages (a comparison with an older one builds this
// file there).
func isPartsRequest(data []byte) bool {
	_, err := replication.DecodePartsRequest(data)
	return err == nil
}

func isDiffRequest(data []byte) bool {
	_, err := replication.DecodeDiffRequest(data)
	return err == nil
}
