// The connection commands: PING, ECHO, HELLO, AUTH (and the token check),
// CLIENT, SELECT, COMMAND, INFO and QUIT.

package resp

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/tidwall/redcon"

	"github.com/tally-dev/tally/frontdoor"
)

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
