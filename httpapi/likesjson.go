package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/crdt"
	"github.com/tally-dev/tally/region"
)

// The answer to a read of a like count, encoded by hand: after the
// network, encoding/json (reflection, the replicas and staleness maps
// built only to be encoded, their keys sorted) was the largest part of
// what GET /v1/likes/{item} cost. The bytes are exactly those
// json.Marshal makes of the api.Likes the handler used to build
// (TestAppendLikesMatchesMarshal), so clients see no change.

// appendLikes appends the JSON of a plain like count read (not a split
// item's, no ?with=meta) of item: rd's count and vector, approx, and the
// staleness of the peers holding it (nil: a standalone replica).
func appendLikes(b []byte, item string, rd region.Read, approx bool, staleness map[string]int64) []byte {
	b = append(b, `{"item":`...)
	b = appendJSONString(b, item)
	b = append(b, `,"count":`...)
	b = strconv.AppendInt(b, rd.Value, 10)
	b = append(b, `,"approx":`...)
	b = strconv.AppendBool(b, approx)
	b = append(b, `,"replicas":`...)
	b = appendReplicas(b, rd.Vector)
	b = append(b, `,"unreconciled":`...)
	b = strconv.AppendInt(b, int64(rd.Unreconciled), 10)
	if len(staleness) > 0 {
		b = append(b, `,"staleness_ms":{`...)
		peers := make([]string, 0, len(staleness))
		for p := range staleness {
			peers = append(peers, p)
		}
		slices.Sort(peers) // as encoding/json orders a map's keys
		for i, p := range peers {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, p)
			b = append(b, ':')
			b = strconv.AppendInt(b, staleness[p], 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// appendReplicas appends a vector as replicasJSON's map encodes: an
// object by replica id in id order, which is the vector's own order.
func appendReplicas(b []byte, v crdt.Vector) []byte {
	if !slices.IsSortedFunc(v, func(x, y crdt.Entry) int { return strings.Compare(x.Replica, y.Replica) }) || hasDuplicateReplica(v) {
		m, _ := json.Marshal(replicasJSON(v)) // not a valid vector; encode it as before
		return append(b, m...)
	}
	b = append(b, '{')
	for i, e := range v {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, e.Replica)
		b = append(b, `:{"p":`...)
		b = strconv.AppendUint(b, e.P, 10)
		b = append(b, `,"n":`...)
		b = strconv.AppendUint(b, e.N, 10)
		b = append(b, '}')
	}
	return append(b, '}')
}

func hasDuplicateReplica(v crdt.Vector) bool {
	for i := 1; i < len(v); i++ {
		if v[i].Replica == v[i-1].Replica {
			return true
		}
	}
	return false
}

// writeJSONBytes writes b, one JSON value, as writeJSON writes its
// encoding: the same headers, then b and a newline.
func writeJSONBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
