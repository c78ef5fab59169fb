package localnet

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValidOnceDirIsSet(t *testing.T) {
	cfg := DefaultConfig()
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "dir") {
		t.Fatalf("Validate without Dir: %v", err)
	}
	cfg.Dir = t.TempDir()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	cfg := Config{
		Regions:            []string{"us", "us", "bad name", ""},
		Host:               "127.0.0.1:4222",
		ClientPorts:        map[string]int{"mars": 4222, "us": 70000},
		JetStreamMaxMemory: -1,
		JetStreamMaxStore:  -1,
		PingInterval:       -time.Second,
	}
	err := cfg.Validate()
	if err == nil {
		t.Fatal("Validate accepted a bad config")
	}
	for _, want := range []string{
		`regions[1] "us": duplicate`,
		`regions[2] "bad name"`,
		`regions[3] ""`,
		"dir: required",
		`host "127.0.0.1:4222"`,
		"ping interval -1s",
		`client port for "mars": unknown region`,
		`client port for "us": 70000 out of range`,
		"max memory -1",
		"max store -1",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if (Config{}).Validate() == nil {
		t.Error("empty config is valid")
	}
	for _, host := range []string{"0.0.0.0", "::", "localhost"} {
		cfg := Config{Regions: []string{"us"}, Dir: "d", Host: host}
		if cfg.Validate() == nil {
			t.Errorf("host %q is valid", host)
		}
	}
}

func TestStartRejectsInvalidConfig(t *testing.T) {
	if _, err := Start(context.Background(), Config{Regions: []string{"us"}}); err == nil {
		t.Fatal("Start accepted a config without Dir")
	}
}
