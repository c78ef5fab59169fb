package resp

import (
	"errors"
	"fmt"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// Transactions: MULTI, then writes, then EXEC. After MULTI a connection
// queues its commands (+QUEUED) instead of running them; EXEC commits
// every queued write in one request to the replica's writer, the path
// pipelined writes take (pipeline.go): one durable batch, so either the
// whole transaction is committed or, if the request fails (the replica is
// not ready, its commit failed, a key's shard is not held here), none of
// it. EXEC answers an array of each command's reply, in order.
//
// A command is checked when it is queued: its name, arity, the
// connection's role, its arguments, and that this replica holds its keys.
// One that fails is answered with its error and the transaction is marked
// aborted: EXEC then answers EXECABORT (CROSSSLOT for keys held
// elsewhere) and applies nothing, as Redis does. Only writes are queued:
// the writer applies ops, not reads, so a read in a transaction could not
// see the writes before it; it is refused at queue time, which aborts the
// transaction. The rate limits (per client, per user) are taken at EXEC:
// if one refuses, EXEC answers its error and applies nothing.
//
// As in Redis, a command that fails as the writer applies it (a counter
// past its bound, a blocked item) answers its error in its place in
// EXEC's array, and the others are applied. WATCH is refused: a CRDT
// merges concurrent writes instead of ordering them, so there is no
// version to compare.

// tx is a connection's transaction, from MULTI to EXEC or DISCARD.
type tx struct {
	queued []queued
	args   int // arguments over all queued commands (users, ids)
	bytes  int // bytes of all queued commands as sent
	// abort is the first error answered while queueing: EXEC answers
	// EXECABORT (or CROSSSLOT) with it and applies nothing.
	abort *replyError
}

// queued is a checked command waiting for EXEC. It keeps no reference to
// redcon's buffer, which the next read reuses.
type queued struct {
	name string
	h    command
	p    pending
}

var (
	errNestedMulti = &replyError{prefix: "ERR", code: frontdoor.CodeBadRequest, msg: "MULTI calls can not be nested"}
	errExecNoMulti = &replyError{prefix: "ERR", code: frontdoor.CodeBadRequest, msg: "EXEC without MULTI"}
	errDiscardNo   = &replyError{prefix: "ERR", code: frontdoor.CodeBadRequest, msg: "DISCARD without MULTI"}
	errWatchInTx   = &replyError{prefix: "ERR", code: frontdoor.CodeBadRequest, msg: "WATCH inside MULTI is not allowed"}
)

// txControl reports whether a command is answered at once during a
// transaction rather than queued.
func txControl(name string) bool {
	switch name {
	case "multi", "exec", "discard", "watch", "quit":
		return true
	}
	return false
}

// MULTI starts queueing.
func cmdMulti(_ *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	if sess.tx != nil {
		return errNestedMulti
	}
	sess.tx = &tx{}
	c.WriteString("OK")
	return nil
}

// DISCARD drops the queued commands.
func cmdDiscard(_ *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	if sess.tx == nil {
		return errDiscardNo
	}
	sess.tx = nil
	c.WriteString("OK")
	return nil
}

// UNWATCH: nothing is ever watched (WATCH is refused), so OK.
func cmdUnwatch(_ *Server, c redcon.Conn, _ *session, _ [][]byte) error {
	c.WriteString("OK")
	return nil
}

// queue checks cmd and queues it in sess's transaction, answering
// QUEUED, or answers why not and marks the transaction aborted.
func (s *Server) queue(c redcon.Conn, sess *session, name string, cmd redcon.Command) {
	t := sess.tx
	q, err := s.check(sess, t, name, cmd)
	if err != nil {
		re := asReply(err)
		if t.abort == nil {
			t.abort = re
		}
		s.writeError(c, name, re)
		return
	}
	t.queued = append(t.queued, q)
	t.args += len(cmd.Args)
	for _, a := range cmd.Args {
		t.bytes += len(a)
	}
	c.WriteString("QUEUED")
}

// check is cmd ready to queue: known, of the right arity, allowed to
// the connection, a write with valid arguments whose keys this replica
// holds, and within one commit's bounds.
func (s *Server) check(sess *session, t *tx, name string, cmd redcon.Command) (queued, error) {
	h, err := s.find(sess, name, cmd)
	if err != nil {
		return queued{}, err
	}
	if h.prepare == nil {
		return queued{}, errorf(frontdoor.CodeBadRequest, "%s cannot be queued in a transaction: tally's transactions hold writes "+
			"(INCR, INCRBY, DECR, DECRBY, SADD, SREM, STOGGLE, PFADD), committed together by EXEC; read before MULTI or after EXEC",
			quoteName(cmd.Args[0]))
	}
	if !s.here(cmd) {
		return queued{}, &replyError{prefix: "CROSSSLOT", code: frontdoor.CodeShardNotHeld,
			msg: "a transaction's keys must all be on shards this replica holds; send this transaction to the replica holding them, or run the writes one by one"}
	}
	size := 0
	for _, a := range cmd.Args {
		size += len(a)
	}
	switch {
	case len(t.queued) >= maxRunCommands:
		return queued{}, errorf(frontdoor.CodeBadRequest, "a transaction holds at most %d commands", maxRunCommands)
	case t.args+len(cmd.Args) > maxRunArgs:
		return queued{}, errorf(frontdoor.CodeBadRequest, "a transaction holds at most %d arguments over all its commands", maxRunArgs)
	case t.bytes+size > s.cfg.MaxRequestBytes:
		return queued{}, errorf(frontdoor.CodeBodyTooLarge, "a transaction holds at most %d bytes over all its commands", s.cfg.MaxRequestBytes)
	}
	p, err := h.prepare(s, cmd.Args[1:])
	if err != nil {
		return queued{}, err
	}
	return queued{name: name, h: h, p: p}, nil
}

// asReply is err as the reply it is answered with: a replyError as it
// is, an error the HTTP API knows with its code, anything else (a check
// never returns one) as bad_request.
func asReply(err error) *replyError {
	var re *replyError
	if errors.As(err, &re) {
		return re
	}
	if code, msg, ok := frontdoor.Describe(err); ok {
		return &replyError{prefix: "ERR", code: code, msg: msg}
	}
	return &replyError{prefix: "ERR", code: frontdoor.CodeBadRequest, msg: err.Error()}
}

// EXEC commits the queued writes together and answers each one's reply.
func cmdExec(s *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	t := sess.tx
	if t == nil {
		return errExecNoMulti
	}
	sess.tx = nil
	if t.abort != nil {
		prefix := "EXECABORT"
		if t.abort.prefix == "CROSSSLOT" {
			prefix = "CROSSSLOT"
		}
		return &replyError{prefix: prefix, code: t.abort.code,
			msg: "Transaction discarded because of previous errors; nothing was applied. First: " + t.abort.msg}
	}
	var ops []region.Op
	from := make([]int, len(t.queued)+1)
	for i, q := range t.queued {
		err := s.limitClient(sess, q.h)
		if err == nil {
			err = s.limitUsers(q.p)
		}
		if err != nil {
			re := asReply(err)
			return &replyError{prefix: re.prefix, code: re.code,
				msg: fmt.Sprintf("transaction not applied: its command %d (%s) was refused: %s", i+1, q.name, re.msg)}
		}
		ops = append(ops, q.p.ops...)
		from[i+1] = len(ops)
	}
	var res []region.Result
	if len(ops) > 0 {
		ctx, cancel := s.writeCtx()
		var err error
		res, err = s.rep.Do(ctx, ops)
		cancel()
		if err != nil {
			return fmt.Errorf("exec %d commands: %w", len(t.queued), err)
		}
	}
	c.WriteArray(len(t.queued))
	for i, q := range t.queued {
		if err := q.p.reply(c, res[from[i]:from[i+1]]); err != nil {
			s.writeError(c, q.name, err)
		}
	}
	return nil
}
