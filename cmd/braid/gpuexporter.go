package main

import (
	"context"
	"errors"
	"log/slog"
)

// cmdGPUExporter runs "braid gpu-exporter".
func cmdGPUExporter(ctx context.Context, args []string, log *slog.Logger) error {
	return errors.New("gpu-exporter: not implemented yet")
}
