package replay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/braidlabs/braid/connectors/arrowexport"
)

// Bound is one end of the range to replay. The zero Bound is the side's
// default: the start of each log for From, its current end for To.
type Bound struct {
	// Time, if set, resolves per input partition to the first offset whose
	// record timestamp is at or after it (Kafka's offset-for-time lookup).
	// For To that offset is excluded.
	Time time.Time
	// Offsets are explicit offsets, topic → partition → offset (To:
	// exclusive). Partitions not listed take the side's default.
	Offsets map[string]map[int32]int64
}

// IsZero reports whether b is the side's default.
func (b Bound) IsZero() bool { return b.Time.IsZero() && len(b.Offsets) == 0 }

func (b Bound) String() string {
	switch {
	case !b.Time.IsZero():
		return b.Time.Format(time.RFC3339Nano)
	case len(b.Offsets) > 0:
		var parts []string
		for _, t := range slices.Sorted(maps.Keys(b.Offsets)) {
			for _, p := range slices.Sorted(maps.Keys(b.Offsets[t])) {
				parts = append(parts, fmt.Sprintf("%s:%d:%d", t, p, b.Offsets[t][p]))
			}
		}
		return strings.Join(parts, ",")
	}
	return "default"
}

// ParseFrom parses --from: an RFC 3339 timestamp, a list
// TOPIC:PARTITION:OFFSET,... or "earliest" (the start of every log).
func ParseFrom(s string) (Bound, error) {
	if strings.TrimSpace(s) == "earliest" {
		return Bound{}, nil
	}
	return parseBound("from", s)
}

// ParseTo parses --to: an RFC 3339 timestamp, a list
// TOPIC:PARTITION:OFFSET,... (exclusive), or "" or "latest" (the current
// end of every log).
func ParseTo(s string) (Bound, error) {
	if s = strings.TrimSpace(s); s == "" || s == "latest" {
		return Bound{}, nil
	}
	return parseBound("to", s)
}

func parseBound(side, s string) (Bound, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Bound{}, fmt.Errorf("replay: --%s is empty", side)
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if t.UnixMilli() < 0 {
			return Bound{}, fmt.Errorf("replay: --%s %s is before 1970", side, s)
		}
		return Bound{Time: t}, nil
	} else if !strings.Contains(s, ":") || looksLikeTime(s) {
		return Bound{}, fmt.Errorf("replay: --%s %q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor TOPIC:PARTITION:OFFSET,...: %v", side, s, err)
	}
	b := Bound{Offsets: map[string]map[int32]int64{}}
	var errs []error
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		j := strings.LastIndexByte(item, ':')
		i := -1
		if j > 0 {
			i = strings.LastIndexByte(item[:j], ':')
		}
		if i <= 0 {
			errs = append(errs, fmt.Errorf("replay: --%s item %q is not TOPIC:PARTITION:OFFSET", side, item))
			continue
		}
		topic := item[:i]
		p, perr := strconv.ParseInt(item[i+1:j], 10, 32)
		o, oerr := strconv.ParseInt(item[j+1:], 10, 64)
		if perr != nil || oerr != nil || p < 0 || o < 0 {
			errs = append(errs, fmt.Errorf("replay: --%s item %q: partition and offset must be non-negative integers", side, item))
			continue
		}
		if b.Offsets[topic] == nil {
			b.Offsets[topic] = map[int32]int64{}
		}
		if _, dup := b.Offsets[topic][int32(p)]; dup {
			errs = append(errs, fmt.Errorf("replay: --%s lists %s:%d twice", side, topic, p))
		}
		b.Offsets[topic][int32(p)] = o
	}
	return b, errors.Join(errs...)
}

// looksLikeTime reports whether s starts like a date (2026-...), so that a
// mistyped timestamp is reported as one rather than as a bad offset list.
func looksLikeTime(s string) bool {
	return len(s) >= 5 && s[4] == '-' && strings.IndexFunc(s[:4], func(r rune) bool { return r < '0' || r > '9' }) < 0
}

// Output is where fused records go: a Kafka topic, or an Arrow or Parquet
// file.
type Output struct {
	// Topic, if set, receives the fused records.
	Topic string
	// Path and Format, if Path is set: the file.
	Path   string
	Format arrowexport.Format
}

func (o Output) String() string {
	if o.Topic != "" {
		return "topic " + o.Topic
	}
	return fmt.Sprintf("%s (%s)", o.Path, o.Format)
}

// ParseOutput parses --out: topic:NAME, or a path ending in .parquet or
// .arrow (also .feather, .ipc).
func ParseOutput(s string) (Output, error) {
	if name, ok := strings.CutPrefix(s, "topic:"); ok {
		if name == "" || strings.ContainsAny(name, " ,:/") || len(name) > 249 {
			return Output{}, fmt.Errorf("replay: --out %q: not a valid topic name", s)
		}
		return Output{Topic: name}, nil
	}
	if s == "" {
		return Output{}, errors.New("replay: --out is required: topic:NAME or a path ending in .parquet or .arrow")
	}
	f, err := arrowexport.FormatForPath(s)
	if err != nil {
		return Output{}, fmt.Errorf("replay: --out: %w (or topic:NAME)", err)
	}
	return Output{Path: s, Format: f}, nil
}

// PartitionRange is the offset range [From, To) of one input partition.
type PartitionRange struct {
	Topic     string
	Input     int // index of Topic among the sources: spans 0, logs 1, metrics 2
	Partition int32
	From, To  int64
	// LogStart is the log start offset when the range was resolved; From
	// below it means records of the range were already deleted.
	LogStart int64
}

// Len is the number of offsets in the range.
func (r PartitionRange) Len() int64 { return max(0, r.To-r.From) }

// resolveRanges turns from and to into one range per partition of every
// input topic (topics in source order, partitions 0..partitions-1).
func resolveRanges(ctx context.Context, adm *kadm.Client, topics []string, partitions int32, from, to Bound) ([]PartitionRange, error) {
	if !from.Time.IsZero() && !to.Time.IsZero() && !from.Time.Before(to.Time) {
		return nil, fmt.Errorf("replay: --from %s is not before --to %s", from, to)
	}
	for _, b := range []Bound{from, to} {
		for t, ps := range b.Offsets {
			if !slices.Contains(topics, t) {
				return nil, fmt.Errorf("replay: offsets name topic %s, which is not an input topic (%s)", t, strings.Join(topics, ", "))
			}
			for p := range ps {
				if p >= partitions {
					return nil, fmt.Errorf("replay: offsets name %s:%d, but the input topics have %d partitions", t, p, partitions)
				}
			}
		}
	}
	list := func(what string, f func() (kadm.ListedOffsets, error)) (kadm.ListedOffsets, error) {
		l, err := f()
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return nil, fmt.Errorf("replay: list %s offsets: %w", what, err)
		}
		return l, nil
	}
	starts, err := list("start", func() (kadm.ListedOffsets, error) { return adm.ListStartOffsets(ctx, topics...) })
	if err != nil {
		return nil, err
	}
	ends, err := list("end", func() (kadm.ListedOffsets, error) { return adm.ListEndOffsets(ctx, topics...) })
	if err != nil {
		return nil, err
	}
	atTime := func(t time.Time) (kadm.ListedOffsets, error) {
		ms := t.UnixMilli()
		if t.Sub(time.UnixMilli(ms)) > 0 {
			ms++ // record timestamps are milliseconds: the first at or after t
		}
		return list("by-time", func() (kadm.ListedOffsets, error) { return adm.ListOffsetsAfterMilli(ctx, ms, topics...) })
	}
	var fromT, toT kadm.ListedOffsets
	if !from.Time.IsZero() {
		if fromT, err = atTime(from.Time); err != nil {
			return nil, err
		}
	}
	if !to.Time.IsZero() {
		if toT, err = atTime(to.Time); err != nil {
			return nil, err
		}
	}
	lookup := func(l kadm.ListedOffsets, t string, p int32) (int64, error) {
		o, ok := l.Lookup(t, p)
		if !ok {
			return 0, fmt.Errorf("replay: no offset listed for %s:%d", t, p)
		}
		return o.Offset, nil
	}
	var out []PartitionRange
	var errs []error
	for i, t := range topics {
		for p := range partitions {
			start, err1 := lookup(starts, t, p)
			end, err2 := lookup(ends, t, p)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			r := PartitionRange{Topic: t, Input: i, Partition: p, From: start, To: end, LogStart: start}
			pick := func(b Bound, byTime kadm.ListedOffsets, dst *int64) error {
				if o, ok := b.Offsets[t][p]; ok {
					*dst = o
					return nil
				}
				if byTime != nil {
					o, err := lookup(byTime, t, p)
					if err != nil {
						return err
					}
					if o < 0 { // no record at or after the time
						o = end
					}
					*dst = o
				}
				return nil
			}
			if err := errors.Join(pick(from, fromT, &r.From), pick(to, toT, &r.To)); err != nil {
				return nil, err
			}
			r.To = min(r.To, end)
			r.From = min(r.From, r.To)
			if _, explicit := from.Offsets[t][p]; explicit {
				if o := from.Offsets[t][p]; o > r.To {
					errs = append(errs, fmt.Errorf("replay: %s:%d: from offset %d is after to offset %d", t, p, o, r.To))
				}
			}
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}
