package httpapi

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// POST /v1/admin/import (admin): a backfill. The body is the NDJSON (or
// JSON array) of POST /v1/events, and each event is booked at its own
// time ("at" or "timestamp") however old: in the totals, and in the time
// windows of every level that still keeps that time (older than a level's
// retention, an event is in the total but in none of that level's
// slots, as if the slot had expired since: refusing it would lose counts
// that the totals can still hold). Times ahead of the replica's clock are
// bounded as for live events.
//
// A re-run of the same file changes nothing: likes, unlikes and unique
// adds are idempotent by nature, and an increment is applied once per
// identity, its idempotency_key, or else ImportKey of its line's bytes and
// how many identical lines came before it in the request. (The keys are
// the increments' idempotency keys: remembered for idempotency_ttl.)
// Grants and spends are not imported: budgets have no time windows to
// book them in, so a backfill has nothing to add to POST /v1/events,
// where a grant's idempotency_key makes a resend count once.
//
// A line with no "type" but an item (or videoId) and a user (or userId)
// is a like: the product's walkthrough payload
// {"videoId":"v123","userId":"u456","timestamp":1698765432} imports as
// it is.
func (s *Server) postImport(w http.ResponseWriter, r *http.Request) error {
	return s.ingest(w, r, true)
}

// importKeyBytes is how much of a line's SHA-256 names it.
const importKeyBytes = 12

var likeType = []byte("like")

// importShape makes a line without a type but with an item and a user a
// like.
func importShape(e *rawEvent) {
	if len(e.typ) == 0 && (len(e.item) > 0 || len(e.videoID) > 0) && (len(e.user) > 0 || len(e.userID) > 0) && len(e.key) == 0 {
		e.typ = likeType
	}
}

// importOp marks a valid event's operation as a backfill, gives an
// increment without an idempotency key its derived one, and refuses
// budget events.
func (b *eventsBatch) importOp(op *region.Op, e *rawEvent) *apiError {
	switch op.Kind {
	case region.OpGrant, region.OpSpend:
		return newError(http.StatusBadRequest, frontdoor.CodeBadRequest,
			"%s events are not imported: budgets have no time windows; send them to POST /v1/events, a grant with an idempotency_key so a resend counts once", op.Kind)
	case region.OpIncr:
		if op.IdemKey == "" {
			sum := sha256.Sum256(b.body[e.start:e.end])
			var k [importKeyBytes]byte
			copy(k[:], sum[:])
			if b.seen == nil {
				b.seen = make(map[[importKeyBytes]byte]int)
			}
			op.IdemKey = importKeyOf(k, b.seen[k])
			b.seen[k]++
		}
	}
	op.Import = true
	return nil
}

// ImportKey is the idempotency key POST /v1/admin/import gives an
// increment line without one: of the line's exact bytes (its JSON
// object, without the newline), and of how many identical lines came
// before it (occurrence), so that two identical increments are two, and a
// re-run of the same lines is the same keys. tallyd import computes it
// over a whole file, which it sends in several requests.
func ImportKey(line []byte, occurrence int) string {
	sum := sha256.Sum256(line)
	var k [importKeyBytes]byte
	copy(k[:], sum[:])
	return importKeyOf(k, occurrence)
}

func importKeyOf(k [importKeyBytes]byte, occurrence int) string {
	return "imp:" + hex.EncodeToString(k[:]) + "." + strconv.Itoa(occurrence)
}
