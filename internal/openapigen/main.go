// Command gen writes tally's OpenAPI document, built from httpapi's route
// table and the api structs, to docs/openapi.json (-w) or to stdout:
//
//	go run ./internal/openapigen -w docs/openapi.json
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/tally-dev/tally/httpapi"
)

func main() {
	out := flag.String("w", "", "write the document to this file instead of stdout")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "openapi:", err)
		os.Exit(1)
	}
}

func run(out string) error {
	doc, err := httpapi.OpenAPI()
	if err != nil {
		return err
	}
	if out == "" {
		_, err = os.Stdout.Write(doc)
		return err
	}
	if err := os.WriteFile(out, doc, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", out, err)
	}
	return nil
}
