package main

import (
	"context"
	"errors"
	"io"
)

// cmdGraph runs "braid graph".
func cmdGraph(ctx context.Context, args []string, stdout io.Writer) error {
	return errors.New("graph: not implemented yet")
}
