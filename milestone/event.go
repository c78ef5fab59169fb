package milestone

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tally-dev/tally/api"
	"github.com/tally-dev/tally/crdt"
)

// Event is one milestone: the like, or the counter increment, that took
// the number.
type Event = api.Milestone

// kvKey is the claim's key in the allocator bucket.
func kvKey(seq string, n uint64) string { return "ms." + seq + "." + strconv.FormatUint(n, 10) }

// subject is the event's subject in the milestone stream.
func subject(seq string, n uint64) string {
	return "tally.milestone." + seq + "." + strconv.FormatUint(n, 10)
}

// maxEventBytes bounds a decoded event.
const maxEventBytes = 4096

// DecodeEvent parses and checks an event from the KV or the stream.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) > maxEventBytes {
		return Event{}, errors.New("milestone: event too large")
	}
	var e Event
	if err := json.Unmarshal(b, &e); err != nil {
		return Event{}, fmt.Errorf("milestone: bad event: %w", err)
	}
	if e.Number == 0 || !crdt.ValidID(e.Item) || (e.User != "" && !crdt.ValidID(e.User)) || !crdt.ValidID(e.Replica) || e.Sequence == "" {
		return Event{}, fmt.Errorf("milestone: bad event %+v", e)
	}
	return e, nil
}

func encodeEvent(e Event) []byte {
	e.StreamSeq = 0
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("milestone: encode event: %v", err)) // plain data
	}
	return b
}
