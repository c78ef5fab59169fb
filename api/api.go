// Package api holds the JSON shapes of tally's HTTP API, shared by the
// server (httpapi), the Go client (client) and tests. It imports nothing
// of tally's, so a client program links none of the server.
//
// Every error answer is an Error. Field comments say what a value means;
// docs/architecture.md says why.
package api

// TimeoutHeader is a request header: how long, in milliseconds, the
// client waits for the answer. A write whose client has given up by then
// is not applied once it reaches the writer, even when it sat at a paused
// or slow replica (or at a holder it was forwarded to) until after the
// client retried it and went on. Without it a write the client gave up on
// may still apply up to the server's request timeout later, after the
// client's next actions. package client sends it from its context's
// deadline.
const TimeoutHeader = "Tally-Timeout-Ms"

// Error is the body of every 4xx and 5xx answer.
type Error struct {
	// Error is for humans.
	Error string `json:"error"`
	// Code is stable, for programs: bad_id, not_ready, storage_failed, ...
	Code string `json:"code"`
}

// PN is one replica's entry of a vector: what it added (P) and subtracted
// (N). A count is the sum of P minus the sum of N over all replicas.
type PN struct {
	P uint64 `json:"p"`
	N uint64 `json:"n"`
}
