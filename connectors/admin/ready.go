package admin

import "errors"

// The reasons Readiness reports.
var (
	ErrNoAssignment = errors.New("admin: no input partitions assigned")
	ErrNoCheckpoint = errors.New("admin: no checkpoint committed yet")
	ErrLastAborted  = errors.New("admin: the last checkpoint aborted")
)

// Readiness returns the readiness check of a job, for Config.Ready: ready
// once the engine has an assignment (at least one open task) and has
// committed at least one checkpoint, and the last checkpoint committed.
// cps may be nil; then the outcome of the last checkpoint is not checked.
func Readiness(e EngineView, cps *Checkpoints) func() error {
	return func() error {
		if len(e.Tasks()) == 0 {
			return ErrNoAssignment
		}
		if e.Stats().Checkpoints.Load() == 0 {
			return ErrNoCheckpoint
		}
		if cps != nil {
			if seen, committed := cps.Last(); seen && !committed {
				return ErrLastAborted
			}
		}
		return nil
	}
}
