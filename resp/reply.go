package resp

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// RESP3 replies. redcon writes RESP2 frames only; the few RESP3 frames
// whose type differs from RESP2's (a map, a set, null, a verbatim string)
// are written raw, after HELLO 3 switched the connection. A RESP2
// connection gets what Redis answers RESP2 clients: a map as a flat array
// of keys and values, a set as an array, null as the null bulk string.

// writeMapLen starts a map of n keys, each followed by its value.
func (sess *session) writeMapLen(c redcon.Conn, n int) {
	if sess.resp == 3 {
		c.WriteRaw(frame('%', n))
		return
	}
	c.WriteArray(2 * n)
}

// writeSetLen starts a set of n members.
func (sess *session) writeSetLen(c redcon.Conn, n int) {
	if sess.resp == 3 {
		c.WriteRaw(frame('~', n))
		return
	}
	c.WriteArray(n)
}

// writeNull answers "no value".
func (sess *session) writeNull(c redcon.Conn) {
	if sess.resp == 3 {
		c.WriteRaw([]byte("_\r\n"))
		return
	}
	c.WriteNull()
}

// writeText answers a text for a human (INFO): a verbatim string of
// format txt in RESP3, a bulk string in RESP2.
func (sess *session) writeText(c redcon.Conn, s string) {
	if sess.resp == 3 {
		b := frame('=', len(s)+4)
		b = append(b, "txt:"...)
		b = append(b, s...)
		c.WriteRaw(append(b, '\r', '\n'))
		return
	}
	c.WriteBulkString(s)
}

// frame is a RESP3 aggregate or blob header: the type byte, n, CRLF.
func frame(kind byte, n int) []byte {
	b := append(make([]byte, 0, 24), kind)
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}
