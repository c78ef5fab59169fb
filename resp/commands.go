package resp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
	"github.com/tally-dev/tally/region"
)

// LikesPrefix starts the key of every set: SADD likes:<item> <user> is the
// like of <item> by <user>.
const LikesPrefix = "likes:"

// replyError is a Redis error reply: a prefix (ERR, NOAUTH, LOADING), the
// message and tally's stable error code, as "<prefix> <msg> (code <code>)".
type replyError struct {
	prefix, code, msg string
}

func (e *replyError) Error() string {
	return e.prefix + " " + oneLine(e.msg) + " (code " + e.code + ")"
}

func errorf(code, format string, args ...any) *replyError {
	return &replyError{prefix: "ERR", code: code, msg: fmt.Sprintf(format, args...)}
}

// oneLine keeps an error reply on one line, as RESP requires.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// command is one command's handler: it returns its reply's writer or an
// error to answer instead.
type command struct {
	// arity is the number of arguments with the name, as Redis counts
	// it: n exactly, or -n for at least n.
	arity int
	write bool // needs the write role when write tokens are set
	read  bool // needs the read role when read tokens are set
	scan  bool // a read that lists (the HTTP API's scan class)
	run   func(s *Server, c redcon.Conn, sess *session, args [][]byte) error
	// prepare, set for the durable writes (writeCommand), checks the
	// arguments and returns the ops; run commits them alone, a pipeline
	// of writes commits many commands' ops together (pipeline.go).
	prepare func(s *Server, args [][]byte) (pending, error)
}

// pending is a write command ready to commit: its ops, and how it
// answers their results (one per op, in order).
type pending struct {
	ops []region.Op
	// users take one write each from the per-user write limit
	// (Config.LimitUser) before the ops commit: prepare only checks, so
	// a transaction can check its commands when it queues them and take
	// the limits when it runs (EXEC).
	users []string
	reply func(c redcon.Conn, res []region.Result) error
}

// limitUsers takes one write of each of p's users from the per-user
// write limit.
func (s *Server) limitUsers(p pending) error {
	if s.cfg.LimitUser == nil {
		return nil
	}
	for _, u := range p.users {
		if err := s.cfg.LimitUser(u); err != nil {
			return err
		}
	}
	return nil
}

// writeCommand is a durable write: run commits its ops alone, here or at
// a holder of their shard (Server.commit), and answers after the commit.
func writeCommand(arity int, prepare func(*Server, [][]byte) (pending, error)) command {
	return command{arity: arity, write: true, prepare: prepare, run: func(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
		p, err := prepare(s, args)
		if err == nil {
			err = s.limitUsers(p)
		}
		if err != nil {
			return err
		}
		ctx, cancel := s.writeCtx()
		defer cancel()
		res, err := s.commit(ctx, p.ops)
		if err != nil {
			return err
		}
		return p.reply(c, res)
	}}
}

// refusal is why a Redis command tally does not take is refused, for the
// ones a Redis user would expect; "" for the rest (unknown commands).
func refusal(name string) string {
	switch name {
	case "watch":
		return "WATCH is not supported: tally's values are CRDTs that merge concurrent writes instead of ordering them, " +
			"so there is no version to watch; MULTI/EXEC commit writes together without it"
	case "expire", "pexpire", "expireat", "pexpireat", "ttl", "pttl", "persist":
		return strings.ToUpper(name) + " is not supported: tally keeps no TTLs"
	}
	return ""
}

// commands maps a lower-case command name to its handler. It is built
// once per Server (commandTable) so no table is global mutable state.
func commandTable() map[string]command {
	return map[string]command{
		"ping":      {arity: -1, run: cmdPing},
		"echo":      {arity: 2, run: cmdEcho},
		"hello":     {arity: -1, run: cmdHello},
		"auth":      {arity: -2, run: cmdAuth},
		"client":    {arity: -2, run: cmdClient},
		"select":    {arity: 2, run: cmdSelect},
		"command":   {arity: -1, run: cmdCommand},
		"info":      {arity: -1, run: cmdInfo},
		"quit":      {arity: -1, run: cmdQuit},
		"multi":     {arity: 1, run: cmdMulti},
		"exec":      {arity: 1, run: cmdExec},
		"discard":   {arity: 1, run: cmdDiscard},
		"unwatch":   {arity: 1, run: cmdUnwatch},
		"incr":      writeCommand(2, prepIncr(false, false)),
		"decr":      writeCommand(2, prepIncr(true, false)),
		"incrby":    writeCommand(3, prepIncr(false, true)),
		"decrby":    writeCommand(3, prepIncr(true, true)),
		"get":       {arity: 2, read: true, run: cmdGet},
		"mget":      {arity: -2, read: true, run: cmdMGet},
		"exists":    {arity: -2, read: true, run: cmdExists},
		"type":      {arity: 2, read: true, run: cmdType},
		"scan":      {arity: -2, read: true, scan: true, run: cmdKeyScan},
		"dbsize":    {arity: 1, read: true, scan: true, run: cmdDBSize},
		"sadd":      writeCommand(-3, prepLike(true)),
		"srem":      writeCommand(-3, prepLike(false)),
		"stoggle":   writeCommand(-3, prepToggle),
		"sismember": {arity: 3, read: true, run: cmdIsMember},
		"scard":     {arity: 2, read: true, run: cmdCard},
		"smembers":  {arity: 2, read: true, scan: true, run: cmdMembers},
		"sscan":     {arity: -3, read: true, scan: true, run: cmdScan},
		"pfadd":     writeCommand(-3, prepPFAdd),
		"pfcount":   {arity: -2, read: true, run: cmdPFCount},
	}
}

// dispatch runs one command and answers its error if it fails.
func (s *Server) dispatch(c redcon.Conn, sess *session, cmd redcon.Command) {
	name := commandName(cmd)
	if sess.tx != nil && !txControl(name) {
		s.queue(c, sess, name, cmd)
		return
	}
	if sess.tx != nil && name == "watch" {
		s.writeError(c, name, errWatchInTx)
		return
	}
	h, err := s.lookup(sess, name, cmd)
	sh := -1
	if err == nil {
		sh, err = s.route(name, cmd.Args)
	}
	switch {
	case err == nil && sh == spread:
		err = s.spreadRead(c, sess, name, cmd)
	case err == nil:
		err = h.run(s, c, sess, cmd.Args[1:])
	}
	if err != nil {
		s.writeError(c, name, err)
	}
}

// lookup is the handler of cmd (named name), once its arity, the
// connection's role and the client's rate limit allow it.
func (s *Server) lookup(sess *session, name string, cmd redcon.Command) (command, error) {
	h, err := s.find(sess, name, cmd)
	if err != nil {
		return command{}, err
	}
	if err := s.limitClient(sess, h); err != nil {
		return command{}, err
	}
	return h, nil
}

// find is the handler of cmd (named name), once its arity and the
// connection's role allow it.
func (s *Server) find(sess *session, name string, cmd redcon.Command) (command, error) {
	if len(cmd.Args) == 0 {
		return command{}, errorf(frontdoor.CodeBadRequest, "empty command")
	}
	h, ok := s.commands[name]
	if !ok {
		if why := refusal(name); why != "" {
			return command{}, errorf(frontdoor.CodeBadRequest, "%s", why)
		}
		return command{}, errorf(frontdoor.CodeNotFound, "unknown command '%s'", quoteName(cmd.Args[0]))
	}
	if n := len(cmd.Args); h.arity > 0 && n != h.arity || h.arity < 0 && n < -h.arity {
		return command{}, errorf(frontdoor.CodeBadRequest, "wrong number of arguments for '%s' command", name)
	}
	if err := s.authorize(sess, h); err != nil {
		return command{}, err
	}
	return h, nil
}

// commandName is the command's name with ASCII letters in lower case,
// cut to 32 bytes (a longer one is no command's).
func commandName(cmd redcon.Command) string {
	if len(cmd.Args) == 0 {
		return ""
	}
	n := cmd.Args[0]
	if len(n) > 32 {
		n = n[:32]
	}
	b := make([]byte, len(n))
	for i, c := range n {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		b[i] = c
	}
	return string(b)
}

// quoteName shows a command name the client sent in an error, printable
// and short.
func quoteName(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return strings.Map(func(r rune) rune {
		if r < ' ' || r > '~' || r == '\'' {
			return '?'
		}
		return r
	}, string(b))
}

// authorize refuses a command whose role the connection has not opened
// with AUTH.
func (s *Server) authorize(sess *session, h command) error {
	t := s.auth.Load()
	switch {
	case h.write && len(t.write) > 0 && sess.role < roleWrite:
		return &replyError{prefix: "NOAUTH", code: frontdoor.CodeUnauthorized,
			msg: "authentication required: writes need AUTH with the write token"}
	case h.read && len(t.read) > 0 && sess.role < roleRead:
		return &replyError{prefix: "NOAUTH", code: frontdoor.CodeUnauthorized,
			msg: "authentication required: reads need AUTH with the read token"}
	}
	return nil
}

// limitClient takes the command from the connection's client token
// bucket of its class, as the HTTP API takes a request: a write, a read,
// a scan (listing); the rest (PING, HELLO, AUTH...) are not limited, as
// the HTTP probes are not.
func (s *Server) limitClient(sess *session, h command) error {
	if s.cfg.LimitClient == nil {
		return nil
	}
	class := ""
	switch {
	case h.write:
		class = frontdoor.ClassWrite
	case h.scan:
		class = frontdoor.ClassScan
	case h.read:
		class = frontdoor.ClassRead
	default:
		return nil
	}
	return s.cfg.LimitClient(class, sess.token, sess.addr)
}

// writeError answers err: a replyError as it is; an error the HTTP API
// knows with its code; anything else as internal, logged under an id the
// client sees.
func (s *Server) writeError(c redcon.Conn, name string, err error) {
	var re *replyError
	if errors.As(err, &re) {
		s.metrics.errors.WithLabelValues(re.code).Inc()
		c.WriteError(re.Error())
		return
	}
	if code, msg, ok := frontdoor.Describe(err); ok {
		s.metrics.errors.WithLabelValues(code).Inc()
		prefix := "ERR"
		if code == frontdoor.CodeNotReady {
			// Nothing was applied: clients retry LOADING on their own.
			prefix = "LOADING"
		}
		c.WriteError((&replyError{prefix: prefix, code: code, msg: msg}).Error())
		return
	}
	s.metrics.errors.WithLabelValues(frontdoor.CodeInternal).Inc()
	id := uuid.NewString()
	s.log.Error("command failed", "id", id, "command", name, "error", err)
	c.WriteError((&replyError{prefix: "ERR", code: frontdoor.CodeInternal, msg: "internal error (id " + id + ")"}).Error())
}
