package replay

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// IsTerminal reports whether f is a character device (a terminal): the
// progress bar is drawn only there.
func IsTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one line, redrawn in place at most every 200ms: the
// share of input offsets covered, records per second and the time left.
// It only reports; nothing it measures decides output.
type progressBar struct {
	w      io.Writer
	start  time.Time
	last   time.Time
	drawn  bool
	width  int
	lastLn int
}

func newProgressBar(w io.Writer) *progressBar {
	return &progressBar{w: w, start: time.Now(), width: 30}
}

func (b *progressBar) update(done, total, fused int64, force bool) {
	if b == nil {
		return
	}
	now := time.Now()
	if !force && now.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last = now
	frac := 1.0
	if total > 0 {
		frac = float64(done) / float64(total)
	}
	fill := int(frac * float64(b.width))
	bar := strings.Repeat("=", fill)
	if fill < b.width {
		bar += ">" + strings.Repeat(" ", b.width-fill-1)
	}
	el := now.Sub(b.start).Seconds()
	rate := 0.0
	if el > 0 {
		rate = float64(done) / el
	}
	eta := "--" // until a rate worth extrapolating (1s)
	switch {
	case done >= total:
		eta = "0s"
	case el >= 1 && rate > 0:
		eta = (time.Duration(float64(total-done)/rate) * time.Second).Round(time.Second).String()
	}
	line := fmt.Sprintf("[%s] %5.1f%%  %s/%s records  %s/s  fused %d  ETA %s",
		bar, frac*100, count(done), count(total), count(int64(rate)), fused, eta)
	pad := ""
	if n := b.lastLn - len(line); n > 0 {
		pad = strings.Repeat(" ", n)
	}
	b.lastLn = len(line)
	fmt.Fprintf(b.w, "\r%s%s", line, pad)
	b.drawn = true
}

// done clears the line.
func (b *progressBar) done() {
	if b == nil || !b.drawn {
		return
	}
	fmt.Fprintf(b.w, "\r%s\r", strings.Repeat(" ", b.lastLn))
}

// count renders n with k/M/G suffixes.
func count(n int64) string {
	switch {
	case n >= 10_000_000_000:
		return fmt.Sprintf("%.1fG", float64(n)/1e9)
	case n >= 10_000_000:
		return fmt.Sprintf("%.1fM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.1fk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}
