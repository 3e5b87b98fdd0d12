package windows

import (
	"errors"
	"fmt"
	"time"
)

const (
	// MaxPanesPerWindow bounds Size/Slide: a sliding window merges this
	// many panes at most each time it is reported.
	MaxPanesPerWindow = 120
	// MaxWindowSize bounds Spec.Size and the allowed lateness (about 416
	// days), so that window arithmetic on event times never overflows.
	MaxWindowSize = time.Duration(1 << 55)
	// maxAbsTime bounds the event times Panes accepts (about year 2116 and
	// 1823); with MaxWindowSize no end or lateness sum overflows int64.
	maxAbsTime int64 = 1 << 62
)

// Spec describes event-time windows aligned to the Unix epoch: a window is
// [end−Size, end) for every end that is a multiple of Slide. Tumbling
// windows have Slide == Size (or Slide 0, which means Size); sliding
// windows a Slide that divides Size, each window then being made of
// Size/Slide panes of length Slide.
type Spec struct {
	// Size is the window length. Required; at most MaxWindowSize.
	Size time.Duration
	// Slide is the distance between consecutive window ends. Default
	// (0): Size (tumbling). It must divide Size, into at most
	// MaxPanesPerWindow panes.
	Slide time.Duration
}

// Validate reports every problem with s at once, nil if none.
func (s Spec) Validate() error {
	var errs []error
	if s.Size <= 0 {
		errs = append(errs, fmt.Errorf("windows: size %v: must be positive", s.Size))
	} else if s.Size > MaxWindowSize {
		errs = append(errs, fmt.Errorf("windows: size %v: must be at most %v", s.Size, MaxWindowSize))
	}
	if s.Slide < 0 {
		errs = append(errs, fmt.Errorf("windows: slide %v: must be positive (or 0 for tumbling windows)", s.Slide))
	}
	if s.Size > 0 && s.Slide > 0 {
		if s.Size%s.Slide != 0 {
			errs = append(errs, fmt.Errorf("windows: slide %v: must divide size %v", s.Slide, s.Size))
		} else if n := s.Size / s.Slide; n > MaxPanesPerWindow {
			errs = append(errs, fmt.Errorf("windows: slide %v: size %v would be %d panes, at most %d", s.Slide, s.Size, n, MaxPanesPerWindow))
		}
	}
	return errors.Join(errs...)
}

// Tumbling reports whether windows do not overlap (Slide is 0 or Size).
func (s Spec) Tumbling() bool { return s.Slide == 0 || s.Slide == s.Size }

// slide returns the effective slide.
func (s Spec) slide() time.Duration {
	if s.Slide == 0 {
		return s.Size
	}
	return s.Slide
}

// floorDiv is ⌊a/b⌋ for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
