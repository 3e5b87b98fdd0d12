//go:build !cgo

package nvml

import "context"

// Open returns a Library whose Init fails with ErrNoCgo: go-nvml needs cgo,
// and this binary was built without it.
func Open() Library { return noCgo{} }

type noCgo struct{}

func (noCgo) Init() error                { return ErrNoCgo }
func (noCgo) Shutdown() error            { return nil }
func (noCgo) Devices() ([]Device, error) { return nil, ErrNoCgo }
func (noCgo) WatchXids(context.Context) (<-chan XidEvent, error) {
	return nil, ErrNoCgo
}
