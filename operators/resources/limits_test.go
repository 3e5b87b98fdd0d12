package resources

import (
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/braidlabs/braid/operators/semconv"
)

func pod(i int) semconv.Identity {
	return semconv.Identity{Service: "vllm", Instance: "pod-" + strconv.Itoa(i) + ":8000", Host: "h" + strconv.Itoa(i%50), Model: "m"}
}

// check asserts the table's indexes agree: every series is in byHost at
// its index and in the LRU list, and bytes add up.
func (t *Table) check(tb testing.TB) {
	tb.Helper()
	t.mu.RLock()
	defer t.mu.RUnlock()
	n, bytes := 0, int64(0)
	for sr := t.mu.lru.next; sr != &t.mu.lru; sr = sr.next {
		n++
		bytes += sr.bytes
		if t.mu.series[sr.key] != sr || t.mu.byHost[sr.id.Host][sr.hostIdx] != sr || sr.bytes != seriesBytes(sr) {
			tb.Fatalf("series %s out of the indexes", sr.key)
		}
	}
	hosts := 0
	for _, hs := range t.mu.byHost {
		hosts += len(hs)
	}
	if n != len(t.mu.series) || hosts != n || bytes != t.mu.bytes || bytes != t.Bytes.Load() {
		tb.Fatalf("%d in the list, %d in the map, %d by host; bytes %d, table %d", n, len(t.mu.series), hosts, bytes, t.mu.bytes)
	}
}

func TestIdleSeriesAreRemoved(t *testing.T) {
	tb := NewTable(1, time.Second, time.Hour, t0)
	tb.Add(pod(1), "kv_cache_usage", false, Sample{T: at(0), V: 1})
	tb.Add(pod(2), "kv_cache_usage", false, Sample{T: at(0), V: 1})
	tb.Add(pod(2), "kv_cache_usage", false, Sample{T: at(7000), V: 2})
	tb.mu.Lock()
	tb.pruneLocked(at(7300)) // cut at 3700 s: pod 1 idle since 0
	tb.mu.Unlock()
	tb.check(t)
	if tb.Series() != 1 || tb.Removed.Load() != 1 {
		t.Fatalf("%d series, %d removed", tb.Series(), tb.Removed.Load())
	}
	if ws := tb.Windows(pod(2), at(7100), at(7200)); len(ws) != 1 || ws[0].AtEnd != 2 {
		t.Fatalf("windows %v", ws)
	}
	if ws := tb.Windows(pod(1), at(0), at(7200)); len(ws) != 0 {
		t.Fatalf("removed series still answers: %v", ws)
	}
}

// TestPodChurnDoesNotGrowTheTable: a new pod every minute, each scraped for
// ten minutes: the table holds the pods of the retention, not all of them.
func TestPodChurnDoesNotGrowTheTable(t *testing.T) {
	tb := NewTable(1, time.Second, 30*time.Minute, t0)
	most := 0
	for minute := range 24 * 60 {
		for p := max(0, minute-10); p <= minute; p++ {
			tb.Add(pod(p), "kv_cache_usage", false, Sample{T: at(float64(60 * minute)), V: 1})
		}
		if minute%5 == 0 {
			tb.mu.Lock()
			tb.pruneLocked(at(float64(60 * minute)))
			tb.mu.Unlock()
		}
		most = max(most, tb.Series())
	}
	tb.check(t)
	if most > 50 || tb.Removed.Load() < 24*60-50 {
		t.Fatalf("up to %d series, %d removed", most, tb.Removed.Load())
	}
}

func TestLimitsEvictTheLeastRecentlyUpdated(t *testing.T) {
	tb := NewTable(1, time.Second, time.Hour, t0)
	tb.SetLimits(Limits{MaxSeries: 3})
	for i := range 3 {
		tb.Add(pod(i), "kv_cache_usage", false, Sample{T: at(1), V: 1})
	}
	tb.Add(pod(0), "kv_cache_usage", false, Sample{T: at(2), V: 2}) // pod 1 is now the least recent
	tb.Add(pod(3), "kv_cache_usage", false, Sample{T: at(2), V: 1})
	tb.check(t)
	if tb.Series() != 3 || tb.Evicted.Load() != 1 {
		t.Fatalf("%d series, %d evicted", tb.Series(), tb.Evicted.Load())
	}
	for i, want := range []int{1, 0, 1, 1} {
		if got := len(tb.Windows(pod(i), at(0), at(3))); got != want {
			t.Fatalf("pod %d: %d windows, want %d", i, got, want)
		}
	}
	// Bytes: a table of 4 KiB holds only what fits.
	tb.SetLimits(Limits{MaxSeries: 1000, MaxTableBytes: 4 << 10})
	for i := range 100 {
		tb.Add(pod(10+i), "kv_cache_usage", false, Sample{T: at(3), V: 1})
		if b := tb.Bytes.Load(); b > 4<<10 {
			t.Fatalf("table of %d bytes", b)
		}
	}
	tb.check(t)
}

// TestMillionIdentitiesStayBounded feeds 1 M distinct resource identities
// (100 k under the race detector) and measures the heap they leave: with
// the limits it stays within MaxTableBytes plus a constant, whatever the
// count.
func TestMillionIdentitiesStayBounded(t *testing.T) {
	n, lim := 1_000_000, Limits{}
	if raceEnabled {
		n, lim = 100_000, Limits{MaxSeries: 25_000, MaxTableBytes: 16 << 20}
	}
	lim.EnsureDefaults()
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	tb := NewTable(1, time.Second, time.Hour, t0)
	tb.SetLimits(lim)
	for i := range n {
		tb.Add(pod(i), "kv_cache_usage", false, Sample{T: at(float64(i) / 1000), V: 1})
	}
	after := heap()
	tb.check(t)
	grew := int64(after) - int64(before)
	t.Logf("%d identities: %d series held, %d evicted, table estimate %d MiB, heap +%d MiB (limits %d series, %d MiB)",
		n, tb.Series(), tb.Evicted.Load(), tb.Bytes.Load()>>20, grew>>20, lim.MaxSeries, lim.MaxTableBytes>>20)
	if tb.Series() > lim.MaxSeries || tb.Bytes.Load() > lim.MaxTableBytes {
		t.Fatalf("table over its limits: %d series, %d bytes", tb.Series(), tb.Bytes.Load())
	}
	// The estimate is within a factor of what the heap holds: a budget
	// set in bytes holds.
	if grew > 2*lim.MaxTableBytes+(16<<20) {
		t.Fatalf("heap grew %d MiB for a table limited to %d MiB", grew>>20, lim.MaxTableBytes>>20)
	}
	runtime.KeepAlive(tb)
}
