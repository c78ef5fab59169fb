package resp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

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

// writeCommand is a durable write: run commits its ops alone and answers
// after the commit.
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
		res, err := s.rep.Do(ctx, p.ops)
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
		sh, err = s.route(sess, name, cmd.Args)
	}
	switch {
	case err == nil && sh == spread:
		err = s.spreadRead(c, sess, name, cmd)
	case err == nil && sh >= 0:
		err = s.forward(c, sess, sh, cmd)
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
	if s.cfg.LimitClient == nil || sess.forwarded { // limited where it arrived
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
	var raw *rawError // a holder's, as it came
	if errors.As(err, &raw) {
		c.WriteError(raw.line)
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

func cmdPing(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	switch len(args) {
	case 0:
		c.WriteString("PONG")
	case 1:
		c.WriteBulk(args[0])
	default:
		return errorf(frontdoor.CodeBadRequest, "wrong number of arguments for 'ping' command")
	}
	return nil
}

func cmdEcho(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	c.WriteBulk(args[0])
	return nil
}

// HELLO [protover [AUTH username password] [SETNAME name]]
func cmdHello(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	proto := sess.resp
	if len(args) > 0 {
		v, err := strconv.Atoi(string(args[0]))
		if err != nil || v < 2 || v > 3 {
			return &replyError{prefix: "NOPROTO", code: frontdoor.CodeBadRequest, msg: "unsupported protocol version; want 2 or 3"}
		}
		proto = v
		args = args[1:]
	}
	newRole, token, name := sess.role, sess.token, sess.name
	for len(args) > 0 {
		switch opt := strings.ToLower(string(args[0])); {
		case opt == "auth" && len(args) >= 3:
			r, err := s.checkToken(sess, args[2])
			if err != nil {
				return err
			}
			newRole, token, args = r, string(args[2]), args[3:]
		case opt == "setname" && len(args) >= 2:
			name, args = string(args[1]), args[2:]
		default:
			return errorf(frontdoor.CodeBadRequest, "syntax error in HELLO option '%s'", quoteName(args[0]))
		}
	}
	sess.resp, sess.role, sess.token, sess.name = proto, newRole, token, name
	fields := []struct {
		k string
		v any
	}{
		{"server", "tally"}, {"version", s.cfg.Version}, {"proto", proto}, {"id", sess.id},
		{"mode", "standalone"}, {"role", "master"}, {"modules", nil},
	}
	sess.writeMapLen(c, len(fields))
	for _, f := range fields {
		c.WriteBulkString(f.k)
		switch v := f.v.(type) {
		case string:
			c.WriteBulkString(v)
		case int:
			c.WriteInt(v)
		case int64:
			c.WriteInt64(v)
		default:
			c.WriteArray(0)
		}
	}
	return nil
}

var errWrongPass = &replyError{prefix: "WRONGPASS", code: frontdoor.CodeUnauthorized, msg: "invalid token"}

// checkToken is the role token opens for sess's connection, or an
// error: WRONGPASS for a wrong token, which the address's AuthGuard
// bucket pays for; an address that failed too often waits before its
// token is checked, and past the guard's longest wait is refused
// unchecked.
func (s *Server) checkToken(sess *session, token []byte) (role, error) {
	wait, ok := s.cfg.AuthGuard.Wait(sess.host)
	if !ok {
		s.metrics.authRefused.Inc()
		return roleNone, errorf(frontdoor.CodeRateLimited, "too many wrong tokens from your address; AUTH again later")
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.stop.Done():
			t.Stop()
			return roleNone, errorf(frontdoor.CodeShuttingDown, "replica is shutting down")
		}
	}
	r := s.auth.Load().roleOf(token)
	if r == roleNone {
		s.cfg.AuthGuard.Fail(sess.host)
		s.metrics.authFailed.Inc()
		return roleNone, errWrongPass
	}
	return r, nil
}

// AUTH <token> or AUTH <username> <token> (the username is ignored).
func cmdAuth(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > 2 {
		return errorf(frontdoor.CodeBadRequest, "wrong number of arguments for 'auth' command")
	}
	t := s.auth.Load()
	if len(t.read)+len(t.write)+len(t.admin) == 0 {
		return errorf(frontdoor.CodeBadRequest, "AUTH called without any token configured for this replica")
	}
	r, err := s.checkToken(sess, args[len(args)-1])
	if err != nil {
		return err
	}
	sess.role, sess.token = r, string(args[len(args)-1])
	c.WriteString("OK")
	return nil
}

// CLIENT SETNAME, GETNAME, SETINFO, ID; others refused.
func cmdClient(_ *Server, c redcon.Conn, sess *session, args [][]byte) error {
	switch sub := strings.ToLower(string(args[0])); sub {
	case "setname":
		if len(args) != 2 {
			return errorf(frontdoor.CodeBadRequest, "wrong number of arguments for 'client|setname' command")
		}
		sess.name = string(args[1])
		c.WriteString("OK")
	case "getname":
		if sess.name == "" {
			sess.writeNull(c)
		} else {
			c.WriteBulkString(sess.name)
		}
	case "setinfo":
		c.WriteString("OK")
	case "id":
		c.WriteInt64(sess.id)
	default:
		return errorf(frontdoor.CodeBadRequest, "unknown subcommand '%s' of CLIENT; tally takes SETNAME, GETNAME, SETINFO, ID", quoteName(args[0]))
	}
	return nil
}

func cmdSelect(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if string(args[0]) != "0" {
		return errorf(frontdoor.CodeBadRequest, "DB index is out of range: only database 0 exists")
	}
	c.WriteString("OK")
	return nil
}

// COMMAND [sub ...]: enough for clients that ask at connect; tally
// describes no commands (an empty array; COUNT: 0).
func cmdCommand(_ *Server, c redcon.Conn, _ *session, args [][]byte) error {
	if len(args) > 0 && strings.EqualFold(string(args[0]), "count") {
		c.WriteInt(0)
		return nil
	}
	c.WriteArray(0)
	return nil
}

func cmdInfo(s *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	var b strings.Builder
	// redis_version is for clients that check it before using a
	// command: the Redis protocol level tally answers as. What runs is
	// server_name and tally_version.
	fmt.Fprintf(&b, "# Server\r\nserver_name:tally\r\ntally_version:%s\r\nredis_version:%s\r\nredis_mode:standalone\r\ntcp_port:%d\r\n",
		s.cfg.Version, RedisCompatVersion, tcpPort(s.ln.Addr()))
	fmt.Fprintf(&b, "# Clients\r\nconnected_clients:%d\r\nmaxclients:%d\r\nmaxclients_per_address:%d\r\n",
		s.open.Load(), s.cfg.MaxConnections, s.cfg.MaxConnectionsPerAddress)
	fmt.Fprintf(&b, "# Stats\r\ntotal_commands_processed:%d\r\nrejected_connections:%d\r\n", s.commandN.Load(), s.refused.Load())
	fmt.Fprintf(&b, "# Replica\r\nregion:%s\r\nreplica:%s\r\naccepting_writes:%d\r\ndurability:%s\r\n",
		s.rep.Region(), s.rep.ID(), boolInt(s.rep.Accepting()), s.rep.Durability())
	if s.cfg.Convergence != nil {
		cv := s.cfg.Convergence()
		stale, inSync := 0, 0
		for _, p := range cv.Peers {
			stale += boolInt(p.Stale)
			inSync += boolInt(p.InSync)
		}
		fmt.Fprintf(&b, "# Replication\r\nrecovered:%d\r\nconverged:%d\r\npeers:%d\r\npeers_stale:%d\r\npeers_in_sync:%d\r\n",
			boolInt(cv.Recovered), boolInt(cv.Converged), len(cv.Peers), stale, inSync)
	}
	sess.writeText(c, b.String())
	return nil
}

// RedisCompatVersion is the redis_version INFO reports, for clients that
// check it: the Redis whose protocol (RESP2 and RESP3, HELLO) tally
// speaks. It is not tally's version (tally_version).
const RedisCompatVersion = "7.0.0"

// tcpPort is a listener address's port, 0 if it has none.
func tcpPort(a net.Addr) int {
	if t, ok := a.(*net.TCPAddr); ok {
		return t.Port
	}
	return 0
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func cmdQuit(_ *Server, c redcon.Conn, sess *session, _ [][]byte) error {
	sess.quit = true // nothing pipelined after QUIT runs
	c.WriteString("OK")
	return c.Close() // redcon flushes the reply, then closes
}

// writeCtx bounds a write's wait for its durable commit.
func (s *Server) writeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(s.stop, s.cfg.RequestTimeout)
}

// INCR, DECR key; INCRBY, DECRBY key n: the counter's value after.
func prepIncr(negate, withBy bool) func(*Server, [][]byte) (pending, error) {
	return func(_ *Server, args [][]byte) (pending, error) {
		key, err := counterKey(args[0])
		if err != nil {
			return pending{}, err
		}
		by := int64(1)
		if withBy {
			if by, err = parseBy(args[1]); err != nil {
				return pending{}, err
			}
		}
		if negate {
			by = -by // |by| <= region.MaxBy: cannot overflow
		}
		return pending{ops: []region.Op{{Kind: region.OpIncr, Item: key, By: by}}, reply: func(c redcon.Conn, res []region.Result) error {
			if res[0].Err != nil {
				return res[0].Err
			}
			c.WriteInt64(res[0].Value)
			return nil
		}}, nil
	}
}

// GET key: the counter's value as Redis answers it, a decimal bulk
// string; nil for a counter never incremented (at 0 after increments,
// "0"), as Redis answers a key never set.
func cmdGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	key, err := counterKey(args[0])
	if err != nil {
		return err
	}
	rd, err := s.rep.Counter(key)
	if err != nil {
		return err
	}
	if len(rd.Vector) == 0 {
		sess.writeNull(c)
		return nil
	}
	c.WriteBulkString(strconv.FormatInt(rd.Value, 10))
	return nil
}

// MaxKeysPerCommand bounds the keys of MGET and EXISTS.
const MaxKeysPerCommand = region.MaxUniqueKeys

// MGET key [key ...]: each counter's value, nil for one never
// incremented.
func cmdMGet(s *Server, c redcon.Conn, sess *session, args [][]byte) error {
	if len(args) > MaxKeysPerCommand {
		return errorf(frontdoor.CodeBadRequest, "%d keys in one MGET; at most %d", len(args), MaxKeysPerCommand)
	}
	reads := make([]region.Read, len(args))
	for i, a := range args {
		key, err := counterKey(a)
		if err != nil {
			return err
		}
		if reads[i], err = s.rep.Counter(key); err != nil {
			return err
		}
	}
	c.WriteArray(len(reads))
	for _, rd := range reads {
		if len(rd.Vector) == 0 {
			sess.writeNull(c)
			continue
		}
		c.WriteBulkString(strconv.FormatInt(rd.Value, 10))
	}
	return nil
}

// SADD / SREM likes:<item> <user> [user ...]: like or unlike, all users in
// one durable commit; the reply counts the users whose state changed.
func prepLike(liked bool) func(*Server, [][]byte) (pending, error) {
	kind := region.OpUnlike
	if liked {
		kind = region.OpLike
	}
	return func(s *Server, args [][]byte) (pending, error) {
		item, err := likesItem(args[0])
		if err != nil {
			return pending{}, err
		}
		users, err := userIDs(args[1:])
		if err != nil {
			return pending{}, err
		}
		ops := make([]region.Op, len(users))
		for i, u := range users {
			ops[i] = region.Op{Kind: kind, Item: s.cfg.Hot.Name(item, u), User: u} // a split item's: the user's part
		}
		return pending{ops: ops, users: users, reply: func(c redcon.Conn, res []region.Result) error {
			changed := 0
			for _, r := range res {
				if r.Err != nil {
					return r.Err
				}
				if r.Changed {
					changed++
				}
			}
			c.WriteInt(changed)
			return nil
		}}, nil
	}
}

// STOGGLE likes:<item> user [idempotency_key]: flip the user's like in
// one step of the writer (POST /v1/likes/{item}/{user}/toggle); the reply
// is the new state, 1 liked or 0, as SISMEMBER would answer it (a retry
// with the key: the state the toggle decided).
func prepToggle(s *Server, args [][]byte) (pending, error) {
	if len(args) > 3 {
		return pending{}, errorf(frontdoor.CodeBadRequest, "wrong number of arguments for 'stoggle' command: STOGGLE %s<item> <user> [idempotency_key]", LikesPrefix)
	}
	item, err := likesItem(args[0])
	if err != nil {
		return pending{}, err
	}
	user := string(args[1])
	if err := frontdoor.CheckID("user", user); err != nil {
		return pending{}, err
	}
	var idem string
	if len(args) == 3 {
		idem = string(args[2])
		if err := frontdoor.CheckID("idempotency_key", idem); err != nil {
			return pending{}, err
		}
	}
	op := region.Op{Kind: region.OpToggle, Item: s.cfg.Hot.Name(item, user), User: user, IdemKey: idem} // a split item's: the user's part
	return pending{ops: []region.Op{op}, users: []string{user}, reply: func(c redcon.Conn, res []region.Result) error {
		if res[0].Err != nil {
			return res[0].Err
		}
		c.WriteInt(boolInt(res[0].Liked))
		return nil
	}}, nil
}

func cmdIsMember(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	users, err := userIDs(args[1:])
	if err != nil {
		return err
	}
	liked, err := s.rep.Liked(s.cfg.Hot.Name(item, users[0]), users[0])
	if err != nil {
		return err
	}
	c.WriteInt(boolInt(liked))
	return nil
}

func cmdCard(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	item, err := likesItem(args[0])
	if err != nil {
		return err
	}
	var n int64
	for _, name := range s.cfg.Hot.Names(item) { // every part of a split item, all held here (route)
		rd, err := s.rep.Likes(name)
		if err != nil {
			return err
		}
		n += rd.Value
	}
	c.WriteInt64(n)
	return nil
}

// PFADD key id [id ...]: 1 if the key's sketch changed, as Redis answers.
func prepPFAdd(_ *Server, args [][]byte) (pending, error) {
	key, err := uniqueKeys(args[:1])
	if err != nil {
		return pending{}, err
	}
	ids, err := uniqueIDs(args[1:])
	if err != nil {
		return pending{}, err
	}
	return pending{ops: []region.Op{{Kind: region.OpUniques, Item: key[0], IDs: ids}}, reply: func(c redcon.Conn, res []region.Result) error {
		if res[0].Err != nil {
			return res[0].Err
		}
		c.WriteInt(boolInt(res[0].Changed))
		return nil
	}}, nil
}

// PFCOUNT key [key ...]: the distinct ids of the union of the keys.
func cmdPFCount(s *Server, c redcon.Conn, _ *session, args [][]byte) error {
	keys, err := uniqueKeys(args)
	if err != nil {
		return err
	}
	rd, err := s.rep.Uniques(keys)
	if err != nil {
		return err
	}
	c.WriteInt64(int64(math.Round(rd.Estimate)))
	return nil
}

// counterKey is a counter key: an id as the HTTP API takes it.
func counterKey(arg []byte) (string, error) {
	key := string(arg)
	return key, frontdoor.CheckID("key", key)
}

// likesItem is the item of a set key, likes:<item>.
func likesItem(arg []byte) (string, error) {
	key := string(arg)
	item, ok := strings.CutPrefix(key, LikesPrefix)
	if !ok {
		return "", errorf(frontdoor.CodeBadID, "set key %s does not start with %q; sets are likes: SADD %s<item> <user>",
			quote(key), LikesPrefix, LikesPrefix)
	}
	return item, frontdoor.CheckID("item", item)
}

// idArgs are a command's ids of one kind (what: "user", "key", "id"), each
// checked as the HTTP API checks it, at most max of them.
func idArgs(args [][]byte, what, plural string, max int) ([]string, error) {
	if len(args) > max {
		return nil, errorf(frontdoor.CodeBadRequest, "%d %s in one command; at most %d", len(args), plural, max)
	}
	ids := make([]string, len(args))
	for i, a := range args {
		ids[i] = string(a)
		if err := frontdoor.CheckID(what, ids[i]); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// userIDs are the users of SADD, SREM, SISMEMBER: ids, in order, each
// once.
func userIDs(args [][]byte) ([]string, error) {
	users, err := idArgs(args, "user", "users", region.MaxUniqueIDs)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(users))
	return slices.DeleteFunc(users, func(u string) bool {
		dup := seen[u]
		seen[u] = true
		return dup
	}), nil
}

// uniqueKeys are PF* keys: ids, sorted, duplicates dropped (a union of a
// key with itself is the key).
func uniqueKeys(args [][]byte) ([]string, error) {
	keys, err := idArgs(args, "key", "keys", region.MaxUniqueKeys)
	if err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

func uniqueIDs(args [][]byte) ([]string, error) {
	return idArgs(args, "id", "ids", region.MaxUniqueIDs)
}

// parseBy is INCRBY's amount: a decimal int64 within region.MaxBy.
func parseBy(arg []byte) (int64, error) {
	by, err := strconv.ParseInt(string(arg), 10, 64)
	if err != nil {
		return 0, errorf(frontdoor.CodeBadBy, "value is not an integer or out of range")
	}
	return by, frontdoor.CheckBy(by)
}

// quote shows a key in an error, cut to a readable length.
func quote(v string) string {
	const max = 64
	if len(v) > max {
		return fmt.Sprintf("%q... (%d bytes)", v[:max], len(v))
	}
	return fmt.Sprintf("%q", v)
}
