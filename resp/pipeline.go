package resp

import (
	"fmt"
	"time"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/region"
)

// Pipelined writes share a commit. redcon hands a connection's commands
// over one by one, and a write answered only after its commit would make
// N pipelined writes N commits in a row, each waiting for the last one's
// fsync. Instead the handler takes the rest of what the client sent with
// a command (redcon's ReadPipeline) and commits each run of consecutive
// writes (INCR, INCRBY, DECR, DECRBY, SADD, SREM, PFADD) as one request:
// the replica applies its ops in order in one durable batch, so every
// command answers what it would have answered alone, and every answer is
// written after the fsync. A read or any other command ends a run, so it
// sees the writes before it; a write refused by its checks (arguments,
// AUTH, a rate limit) is answered with its error in its place.

// Bounds on one run: commands, and arguments (users, ids) over all of
// them, so one commit stays as large as one SADD or PFADD may be.
const (
	maxRunCommands = 256
	maxRunArgs     = region.MaxUniqueIDs
)

// serve answers cmds, commands a client pipelined, in order.
func (s *Server) serve(c redcon.Conn, sess *session, cmds []redcon.Command) {
	for len(cmds) > 0 && !sess.quit {
		n := 0
		if sess.tx == nil { // in a transaction, each command is queued
			n = s.writeRun(cmds)
		}
		if n < 2 {
			s.serveOne(c, sess, cmds[0])
			cmds = cmds[1:]
			continue
		}
		s.serveRun(c, sess, cmds[:n])
		cmds = cmds[n:]
	}
}

// writeRun is how many of the first cmds are writes to commit together.
func (s *Server) writeRun(cmds []redcon.Command) int {
	n, args := 0, 0
	for _, cmd := range cmds {
		if h, ok := s.commands[commandName(cmd)]; !ok || h.prepare == nil || n == maxRunCommands || !s.here(cmd) {
			break
		}
		if args += len(cmd.Args); n > 0 && args > maxRunArgs {
			break
		}
		n++
	}
	return n
}

// serveOne answers one command; a panic is answered as an internal error
// (never into redcon, which would end the process).
func (s *Server) serveOne(c redcon.Conn, sess *session, cmd redcon.Command) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("command panicked", "command", commandName(cmd), "panic", fmt.Sprint(p))
			c.WriteError("ERR internal error (code internal)")
		}
	}()
	s.commandN.Add(1)
	start := time.Now()
	s.dispatch(c, sess, cmd)
	s.observe(commandName(cmd), time.Since(start))
}

// serveRun commits a run of writes together and answers each in order.
func (s *Server) serveRun(c redcon.Conn, sess *session, run []redcon.Command) {
	answered := 0
	start := time.Now()
	defer func() {
		for _, cmd := range run {
			s.observe(commandName(cmd), time.Since(start))
		}
	}()
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("pipelined writes panicked", "commands", len(run), "panic", fmt.Sprint(p))
			for range run[answered:] {
				c.WriteError("ERR internal error (code internal)")
			}
		}
	}()
	type slot struct {
		name     string
		p        pending
		err      error
		from, to int // the command's ops in the request
	}
	slots := make([]slot, len(run))
	var ops []region.Op
	for i, cmd := range run {
		s.commandN.Add(1)
		sl := &slots[i]
		sl.name = commandName(cmd)
		h, err := s.lookup(sess, sl.name, cmd)
		if err == nil {
			sl.p, err = h.prepare(s, cmd.Args[1:])
		}
		if err == nil {
			err = s.limitUsers(sl.p)
		}
		if sl.err = err; err != nil {
			continue
		}
		sl.from = len(ops)
		ops = append(ops, sl.p.ops...)
		sl.to = len(ops)
	}
	var res []region.Result
	var failed error // the request's: every command's
	if len(ops) > 0 {
		ctx, cancel := s.writeCtx()
		res, failed = s.rep.Do(ctx, ops)
		cancel()
	}
	for i := range slots {
		sl := &slots[i]
		err := sl.err
		if err == nil {
			err = failed
		}
		if err == nil {
			err = sl.p.reply(c, res[sl.from:sl.to])
		}
		if err != nil {
			s.writeError(c, sl.name, err)
		}
		answered++
	}
}
