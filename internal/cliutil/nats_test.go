package cliutil

import (
	"errors"
	"flag"
	"strings"
	"testing"
)

// One auth story for every NATS client command: --creds or --user, not
// both; a user's password from --password where the command takes it,
// else from the environment, and a command with --password wants one.
func TestNATSClientCheck(t *testing.T) {
	env := func(pw string) func(string) string {
		return func(k string) string {
			if k == EnvNATSPassword {
				return pw
			}
			return ""
		}
	}
	cases := []struct {
		name         string
		args         []string
		passwordFlag bool
		env          string
		want         string // "" for no error
		wantPassword string
	}{
		{"no url", nil, false, "", "--nats is required", ""},
		{"creds", []string{"--nats", "x", "--creds", "c"}, false, "", "", ""},
		{"creds and user", []string{"--nats", "x", "--creds", "c", "--user", "u"}, false, "", "not both", ""},
		{"user, password from env", []string{"--nats", "x", "--user", "u"}, false, "pw", "", "pw"},
		{"user, no password anywhere", []string{"--nats", "x", "--user", "u"}, false, "", "", ""},
		{"--password wins over env", []string{"--nats", "x", "--user", "u", "--password", "p"}, true, "pw", "", "p"},
		{"--password command, password from env", []string{"--nats", "x", "--user", "u"}, true, "pw", "", "pw"},
		{"--password command, user without password", []string{"--nats", "x", "--user", "u"}, true, "", "--user and --password go together", ""},
		{"password without user", []string{"--nats", "x", "--password", "p"}, true, "", "--user and --password go together", "p"},
	}
	for _, c := range cases {
		var nc NATSClient
		fs := NewFlagSet("test", func(fs *flag.FlagSet) { nc.Bind(fs, "`url`", c.passwordFlag) })
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		err := nc.Check("cmd", env(c.env))
		var uerr *UsageError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want no error", c.name, err)
		case c.want != "" && (!errors.As(err, &uerr) || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "cmd: ")):
			t.Errorf("%s: %v, want a usage error \"cmd: ...%s...\"", c.name, err, c.want)
		case nc.Password != c.wantPassword:
			t.Errorf("%s: password %q, want %q", c.name, nc.Password, c.wantPassword)
		}
	}
}
