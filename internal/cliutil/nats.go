package cliutil

import (
	"flag"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// EnvNATSPassword holds the password of a command's NATS user.
const EnvNATSPassword = "TALLY_NATS_PASSWORD"

// NATSClient is how a command reaches a deployment's NATS as a client
// (tallyd admin retire, milestones follow, events tail), with one auth
// story: --creds, or --user with its password from env
// TALLY_NATS_PASSWORD (or from --password, where a command takes it); not
// both.
type NATSClient struct {
	URL, Creds, User, Password string
	// passwordFlag: the command takes --password, and then a user needs a
	// password.
	passwordFlag bool
}

// Bind defines --nats (described by urlUsage), --creds and --user on fs,
// and --password if passwordFlag.
func (c *NATSClient) Bind(fs *flag.FlagSet, urlUsage string, passwordFlag bool) {
	c.passwordFlag = passwordFlag
	fs.StringVar(&c.URL, "nats", "", urlUsage)
	fs.StringVar(&c.Creds, "creds", "", "NATS credentials `file`")
	if !passwordFlag {
		fs.StringVar(&c.User, "user", "", "NATS `user` (password from env "+EnvNATSPassword+")")
		return
	}
	fs.StringVar(&c.User, "user", "", "NATS `user` (with --password, or env "+EnvNATSPassword+")")
	fs.StringVar(&c.Password, "password", "", "NATS `password`")
}

// Check takes a --user's password from getenv unless --password gave it,
// and returns a UsageError, its message prefixed with cmd, if the flags do
// not say how to connect.
func (c *NATSClient) Check(cmd string, getenv func(string) string) error {
	if c.Password == "" && c.User != "" {
		pw, err := EnvSecret(getenv, EnvNATSPassword)
		if err != nil {
			return Usagef("%s: %v", cmd, err)
		}
		c.Password = pw
	}
	switch {
	case c.URL == "":
		return Usagef("%s: --nats is required", cmd)
	case c.Creds != "" && c.User != "":
		return Usagef("%s: give --creds or --user, not both", cmd)
	case c.passwordFlag && (c.User == "") != (c.Password == ""):
		return Usagef("%s: --user and --password go together (or the password in env %s)", cmd, EnvNATSPassword)
	}
	return nil
}

// Connect connects to --nats as name, with opts after the auth options,
// and opens JetStream on the connection. Errors are prefixed with cmd;
// the caller closes the connection.
func (c *NATSClient) Connect(cmd, name string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream, error) {
	opts = append([]nats.Option{nats.Name(name)}, opts...)
	if c.Creds != "" {
		opts = append(opts, nats.UserCredentials(c.Creds))
	}
	if c.User != "" {
		opts = append(opts, nats.UserInfo(c.User, c.Password))
	}
	nc, err := nats.Connect(c.URL, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: connect to %s: %w", cmd, c.URL, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: jetstream: %w", cmd, err)
	}
	return nc, js, nil
}
