package client_test

import (
	"context"
	"fmt"

	"github.com/tally-dev/tally/client"
)

// The README's example (## From Go), compiled with the package.
func Example() {
	ctx := context.Background()
	run := func() error {
		c, err := client.New(client.Config{BaseURL: "http://localhost:8081"})
		if err != nil {
			return err
		}
		like, err := c.Like(ctx, "post1", "alice")
		if err != nil {
			return err // a *client.Error: its Status, and a Code such as "not_ready"
		}
		fmt.Println(like.Count, like.Changed)
		return nil
	}
	_ = run
}
