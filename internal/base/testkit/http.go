package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// DoJSON sends one request (body "" for none) and decodes the JSON object
// it answers, whatever the status.
func DoJSON(method, url, body string) (int, map[string]any, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %w", method, url, err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %s: %w", method, url, raw, err)
	}
	return resp.StatusCode, out, nil
}

// CallJSON is DoJSON without a body, failing t on any error.
func CallJSON(t testing.TB, method, url string) (int, map[string]any) {
	t.Helper()
	code, out, err := DoJSON(method, url, "")
	if err != nil {
		t.Fatal(err)
	}
	return code, out
}
