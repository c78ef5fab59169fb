package cliutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvSecret(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	withNewline := write("pw", "s3cret\n")
	crlf := write("crlf", "s3cret\r\n")
	inner := write("inner", "  two words \n")
	empty := write("empty", "\n")
	missing := filepath.Join(dir, "absent")

	for _, tc := range []struct {
		name    string
		env     map[string]string
		want    string
		wantErr string
	}{
		{name: "unset", env: nil, want: ""},
		{name: "value", env: map[string]string{"X": "v"}, want: "v"},
		{name: "file", env: map[string]string{"X_FILE": withNewline}, want: "s3cret"},
		{name: "crlf file", env: map[string]string{"X_FILE": crlf}, want: "s3cret"},
		{name: "spaces kept", env: map[string]string{"X_FILE": inner}, want: "  two words "},
		{name: "both", env: map[string]string{"X": "v", "X_FILE": withNewline}, wantErr: "X and X_FILE are both set"},
		{name: "missing file", env: map[string]string{"X_FILE": missing}, wantErr: "X_FILE: open " + missing},
		{name: "empty file", env: map[string]string{"X_FILE": empty}, wantErr: "X_FILE: " + empty + " is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := EnvSecret(func(k string) string { return tc.env[k] }, "X")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("the error shows the secret: %v", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
