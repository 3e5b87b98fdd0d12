package engine

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Headers of a record cut into chunks (Chunks): braid.chunk is the chunk's
// index, 0-based, braid.chunks the number of chunks, both decimal. Every
// chunk has the key of the whole record; chunk 0 also carries the whole
// record's other headers.
const (
	HeaderChunk  = "braid.chunk"
	HeaderChunks = "braid.chunks"
)

// DefaultMaxRecordBytes is the default of Config.MaxRecordBytes: the
// broker's default message.max.bytes (1,048,588) minus headroom for record
// and batch overhead.
const DefaultMaxRecordBytes = 1_000_000

// chunkHeaderBytes bounds what the two chunk headers add to a record.
const chunkHeaderBytes = len(HeaderChunk) + len(HeaderChunks) + 2*10

// ErrRecordTooLarge is returned (wrapped) for a record over the limit that
// cannot be produced or cut.
var ErrRecordTooLarge = errors.New("engine: record too large")

// RecordBytes is the size a record counts against MaxRecordBytes: key,
// value, and the keys and values of its headers.
func RecordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value)
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// Chunks cuts r into records of at most limit bytes each (RecordBytes): the
// same topic, partition, key and timestamp, the value split in order, with
// the headers HeaderChunk and HeaderChunks. A record within the limit is
// returned alone and unchanged. A record whose key and headers alone leave
// no room for its value is an error (ErrRecordTooLarge). The chunks must
// reach their partition one after another from one producer: emit them with
// Task.EmitChunks, and read them back with a Reassembler.
func Chunks(r *kgo.Record, limit int) ([]*kgo.Record, error) {
	size := RecordBytes(r)
	if size <= limit {
		return []*kgo.Record{r}, nil
	}
	fixed := size - len(r.Value) + chunkHeaderBytes // chunk 0 carries every header
	room := limit - fixed
	if room < 1 {
		return nil, fmt.Errorf("%w: key and headers of %d bytes leave no room for the value within %d bytes (topic %s)", ErrRecordTooLarge, fixed, limit, r.Topic)
	}
	n := (len(r.Value) + room - 1) / room
	count := strconv.AppendInt(nil, int64(n), 10)
	out := make([]*kgo.Record, 0, n)
	for i := range n {
		part := r.Value[i*room : min((i+1)*room, len(r.Value))]
		c := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Key: r.Key, Value: part, Timestamp: r.Timestamp}
		if i == 0 {
			c.Headers = append(c.Headers, r.Headers...)
		}
		c.Headers = append(c.Headers,
			kgo.RecordHeader{Key: HeaderChunk, Value: strconv.AppendInt(nil, int64(i), 10)},
			kgo.RecordHeader{Key: HeaderChunks, Value: count})
		out = append(out, c)
	}
	return out, nil
}

// chunkOf returns the chunk index and count of r, and whether r is a chunk
// at all. A chunk header that does not parse, or an index outside the
// count, makes r a chunk with count 0 (which no reassembly completes).
func chunkOf(r *kgo.Record) (i, n int, ok bool) {
	var hi, hn []byte
	found := false
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderChunk:
			hi, found = h.Value, true
		case HeaderChunks:
			hn, found = h.Value, true
		}
	}
	if !found {
		return 0, 0, false
	}
	a, err1 := strconv.Atoi(string(hi))
	b, err2 := strconv.Atoi(string(hn))
	if err1 != nil || err2 != nil || b < 1 || a < 0 || a >= b {
		return 0, 0, true
	}
	return a, b, true
}

// Reassembler puts records cut by Chunks back together. Chunks are matched
// by topic, partition, producer id and key, so records of the same key
// written by different producers (instances) to one partition do not mix.
// A chunk that does not continue what is pending for its key (a missing
// predecessor, a different count) is dropped, with what was pending, and
// counted in Dropped. Not safe for concurrent use.
//
// Pending chunks live in memory. A task may checkpoint between two chunks
// of one record; a processor that must not lose it across a restart writes
// Pending into its state at the checkpoint and feeds it back to Add on
// Restore.
type Reassembler struct {
	pending map[chunkID]*pendingChunks
	bytes   int64
	dropped int64
}

type chunkID struct {
	topic     string
	partition int32
	producer  int64
	key       string
}

type pendingChunks struct {
	n     int
	parts []*kgo.Record
}

// Add takes one record as read. A record that is not a chunk comes back
// at once; the last chunk of a record brings the whole record back: the
// key, timestamp and headers of chunk 0 (without the chunk headers), the
// values joined, the offset of the last chunk. Otherwise Add returns
// false. Add keeps r (and its slices) while it is pending.
func (a *Reassembler) Add(r *kgo.Record) (*kgo.Record, bool) {
	i, n, chunk := chunkOf(r)
	if !chunk {
		return r, true
	}
	if a.pending == nil {
		a.pending = map[chunkID]*pendingChunks{}
	}
	id := chunkID{r.Topic, r.Partition, r.ProducerID, string(r.Key)}
	p := a.pending[id]
	if i == 0 {
		if p != nil {
			a.drop(id, p)
		}
		if n == 0 {
			a.dropped++
			return nil, false
		}
		p = &pendingChunks{n: n}
		a.pending[id] = p
	} else if p == nil || p.n != n || len(p.parts) != i {
		if p != nil {
			a.drop(id, p)
		}
		a.dropped++
		return nil, false
	}
	p.parts = append(p.parts, r)
	a.bytes += int64(len(r.Value))
	if len(p.parts) < n {
		return nil, false
	}
	delete(a.pending, id)
	size := 0
	for _, c := range p.parts {
		size += len(c.Value)
	}
	a.bytes -= int64(size)
	first, last := p.parts[0], p.parts[n-1]
	whole := *first
	whole.Headers = nil
	for _, h := range first.Headers {
		if h.Key != HeaderChunk && h.Key != HeaderChunks {
			whole.Headers = append(whole.Headers, h)
		}
	}
	whole.Value = make([]byte, 0, size)
	for _, c := range p.parts {
		whole.Value = append(whole.Value, c.Value...)
	}
	whole.Offset = last.Offset
	return &whole, true
}

func (a *Reassembler) drop(id chunkID, p *pendingChunks) {
	for _, c := range p.parts {
		a.bytes -= int64(len(c.Value))
	}
	delete(a.pending, id)
	a.dropped++
}

// Pending returns the chunks held, in no particular order across keys and
// in order within one key.
func (a *Reassembler) Pending() []*kgo.Record {
	var out []*kgo.Record
	for _, p := range a.pending {
		out = append(out, p.parts...)
	}
	return out
}

// PendingBytes is the size of the values held.
func (a *Reassembler) PendingBytes() int64 { return a.bytes }

// Dropped counts the incomplete records dropped so far.
func (a *Reassembler) Dropped() int64 { return a.dropped }
