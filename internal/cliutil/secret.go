package cliutil

import (
	"fmt"
	"os"
	"strings"
)

// FileSuffix turns a secret's environment variable into the one that
// names a file holding it: TALLY_NATS_PASSWORD_FILE for
// TALLY_NATS_PASSWORD. A Kubernetes pod mounts a Secret as files and
// points each variable at its own key, so pods of one StatefulSet can
// each read their own NATS user's password.
const FileSuffix = "_FILE"

// EnvSecret reads the secret named by the environment variable name: its
// value, or the contents of the file that name+"_FILE" names, with
// trailing newlines and carriage returns removed (a file written with
// echo or by an editor ends in one). Neither set is "" and no error.
// Both set, an unreadable file or an empty one is an error naming the
// variable (never the secret): a replica started without the secret it
// was pointed at would run unauthenticated or fail later, far from the
// cause.
func EnvSecret(getenv func(string) string, name string) (string, error) {
	v, file := getenv(name), getenv(name+FileSuffix)
	switch {
	case file == "":
		return v, nil
	case v != "":
		return "", fmt.Errorf("%s and %s%s are both set: set one", name, name, FileSuffix)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%s%s: %w", name, FileSuffix, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("%s%s: %s is empty", name, FileSuffix, file)
	}
	return s, nil
}
