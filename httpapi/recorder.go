package httpapi

import (
	"bytes"
	"net/http"
)

// Recorder is an http.ResponseWriter that keeps an answer in memory: the
// answer of a request forwarded to a shard's holder (package node) or of
// a part read here. The first status written wins; a body written
// without one is 200, as net/http does.
type Recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{header: http.Header{}} }

func (r *Recorder) Header() http.Header { return r.header }

func (r *Recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

func (r *Recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	return r.body.Write(b)
}

// Status is the answer's status (200 if none was written).
func (r *Recorder) Status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}

// Body is the answer's body.
func (r *Recorder) Body() []byte { return r.body.Bytes() }
