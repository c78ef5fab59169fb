package localnet

import (
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// natsLogger bridges a nats-server's logs to hclog (server.Logger). A
// nats-server reports some start-up failures, such as JetStream failing to
// start, only through Fatalf and carries on; the default nats logger exits
// the process there. This bridge logs them as errors and remembers the
// first, so Start can fail with it instead.
type natsLogger struct {
	log hclog.Logger

	mu    sync.Mutex
	fatal string
}

func (l *natsLogger) Noticef(format string, v ...any) {
	if l.log.IsInfo() {
		l.log.Info(fmt.Sprintf(format, v...))
	}
}

func (l *natsLogger) Warnf(format string, v ...any) {
	if l.log.IsWarn() {
		l.log.Warn(fmt.Sprintf(format, v...))
	}
}

func (l *natsLogger) Errorf(format string, v ...any) {
	if l.log.IsError() {
		l.log.Error(fmt.Sprintf(format, v...))
	}
}

func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatal == "" {
		l.fatal = msg
	}
	l.mu.Unlock()
	l.log.Error(msg, "fatal", true)
}

func (l *natsLogger) Debugf(format string, v ...any) {
	if l.log.IsDebug() {
		l.log.Debug(fmt.Sprintf(format, v...))
	}
}

func (l *natsLogger) Tracef(format string, v ...any) {
	if l.log.IsTrace() {
		l.log.Trace(fmt.Sprintf(format, v...))
	}
}

// firstFatal returns the first fatal message logged, if any.
func (l *natsLogger) firstFatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatal
}
