package engine

import (
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchSizer keeps what one fetch of the client holds once decompressed
// within its share of FetchBufferBytes (target). A fetch is sized in the
// bytes the broker sends — compressed batches — but the client holds its
// records decompressed until they are polled, and a backlog of KV-block
// events compresses 8.5:1: a fetch sized at the target in compressed bytes
// held 8.5 times it, and MaxConcurrentFetches such fetches (one per broker)
// can be held at once. The sizer follows the ratio of decompressed to
// compressed bytes of the batches the client reads (a franz-go
// HookFetchBatchRead) and asks for target divided by that ratio
// (Client.UpdateFetchMaxBytes).
//
// The ratio is an average over the last few targets' worth of compressed
// bytes read, so that it follows a change of input; a batch more
// compressible than the average shrinks the next fetches at once. A record
// costs the client recordOverhead bytes besides its key, value and
// headers, which the ratio counts too (for small records it is most of
// what a fetch holds).
type fetchSizer struct {
	target int64 // decompressed bytes one fetch may hold
	cl     atomic.Pointer[kgo.Client]
	// size is the fetch size asked for now, in bytes as sent
	// (Stats.FetchBytes).
	size *atomic.Int64
	// partition bounds what one partition contributes to a fetch
	// (maxPartitionFetchBytes; alignedPartitionFetchBytes with
	// alignment on).
	partition int64

	mu        sync.Mutex
	comp, raw int64 // compressed and decompressed bytes read (decaying sums)
}

// recordOverhead is what a fetched record takes in the client besides its
// bytes: the kgo.Record and its share of the fetch's bookkeeping.
const recordOverhead = 256

// minFetchBytes is the smallest fetch size asked for, and that of the
// fetches before the first batch is read. A broker returns a partition's
// first batch whole however small the fetch, so this bounds the number of
// round trips, not what a fetch may hold.
const minFetchBytes = 16 << 10

// maxPartitionFetchBytes is franz-go's (and Kafka's) default bound on what
// one partition contributes to a fetch.
const maxPartitionFetchBytes = 1 << 20

// alignedPartitionFetchBytes bounds what one partition contributes to a
// fetch of the job's consumer with alignment on (Config.Alignment): a
// fetched batch is processed whole however far ahead it runs, and a
// mebibyte of compressed records covers minutes of event time — nine of
// a log partition, four of a span partition on the benchmark's fleet —
// where the bound is a minute. A quarter of that keeps what runs ahead
// of the bound to about a batch of it.
const alignedPartitionFetchBytes = 256 << 10

// maxFetchBytes is the largest fetch size asked for: franz-go's default
// (and about the brokers' fetch.max.bytes), half of what the client reads
// from a broker at most (BrokerMaxReadBytes, 100 MiB), which a larger
// fetch would pass on a large budget.
const maxFetchBytes = 50 << 20

// maxConcurrentFetches bounds the fetches the client holds at once (one
// per broker at most).
const maxConcurrentFetches = 4

// maxConcurrentRestores bounds the tasks restoring their state from the
// changelog at once; the others opening wait their turn.
const maxConcurrentRestores = 4

func newFetchSizer(target int64, size *atomic.Int64) *fetchSizer {
	s := &fetchSizer{target: max(target, minFetchBytes), size: size, partition: maxPartitionFetchBytes}
	// Until a batch has been read the ratio is unknown: the first
	// fetches are small.
	s.size.Store(minFetchBytes)
	return s
}

// opts are the client options the sizer starts with: its hook, the first
// fetch size, and at most maxConcurrentFetches fetches held at once.
func (s *fetchSizer) opts() []kgo.Opt {
	n := s.size.Load()
	return []kgo.Opt{
		kgo.WithHooks(s),
		kgo.FetchMaxBytes(int32(n)),
		kgo.FetchMaxPartitionBytes(s.partitionBytes(n)),
		kgo.MaxConcurrentFetches(maxConcurrentFetches),
	}
}

// partitionBytes is what one partition may contribute to a fetch of n
// bytes.
func (s *fetchSizer) partitionBytes(n int64) int32 { return int32(min(n, s.partition)) }

// attach gives the sizer the client whose fetches it sizes.
func (s *fetchSizer) attach(cl *kgo.Client) { s.cl.Store(cl) }

// fetchBytes is the fetch size for raw decompressed bytes per comp bytes
// as sent: the target over that ratio, at least minFetchBytes and at most
// the target (a ratio below 1 is taken as 1) and maxFetchBytes.
func (s *fetchSizer) fetchBytes(comp, raw int64) int64 {
	if raw <= comp {
		return min(s.target, maxFetchBytes)
	}
	return min(max(int64(float64(s.target)*float64(comp)/float64(raw)), minFetchBytes), maxFetchBytes)
}

// OnFetchBatchRead implements kgo.HookFetchBatchRead. It runs on the
// client's fetch goroutines.
func (s *fetchSizer) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	if m.CompressedBytes <= 0 {
		return
	}
	comp := int64(m.CompressedBytes)
	raw := int64(m.UncompressedBytes) + int64(m.NumRecords)*recordOverhead
	s.mu.Lock()
	s.comp += comp
	s.raw += raw
	if s.comp > 4*s.target {
		// Decay: the average covers the last few targets' worth.
		s.comp, s.raw = s.comp/2, s.raw/2
	}
	n := s.fetchBytes(s.comp, s.raw)
	if b := s.fetchBytes(comp, raw); b < n {
		n = b // this batch compresses better than the average
	}
	changed := n != s.size.Load()
	if changed {
		s.size.Store(n)
	}
	s.mu.Unlock()
	if cl := s.cl.Load(); changed && cl != nil {
		cl.UpdateFetchMaxBytes(int32(n), s.partitionBytes(n))
	}
}

// newSizedClient is a client of opts whose fetches a fetchSizer keeps
// within target decompressed bytes each, at most maxConcurrentFetches of
// them: the changelog reader of a restore and the global tables' reader.
func newSizedClient(opts []kgo.Opt, target int64) (*kgo.Client, error) {
	s := newFetchSizer(target, new(atomic.Int64))
	cl, err := kgo.NewClient(append(opts, s.opts()...)...)
	if err != nil {
		return nil, err
	}
	s.attach(cl)
	return cl, nil
}

// fetchShare is what one fetch may hold decompressed: an eighth of
// FetchBufferBytes (four such fetches are half of it), at least a record.
func (e *Engine) fetchShare() int64 {
	return max(e.cfg.FetchBufferBytes/(2*maxConcurrentFetches), int64(e.cfg.MaxRecordBytes))
}
