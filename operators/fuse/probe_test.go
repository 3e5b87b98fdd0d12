package fuse

import (
	"fmt"
	"sync"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/braidlabs/braid/connectors/otlp"
)

// undecodableLog collects OnUndecodable's reports.
type undecodableLog struct {
	mu  sync.Mutex
	got []Undecodable
}

func (l *undecodableLog) report(u Undecodable) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, u)
}

func (l *undecodableLog) reports() []Undecodable {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Undecodable(nil), l.got...)
}

// jsonSpans is an OTLP/JSON traces message with one span of trace i, as
// the Collector writes with encoding otlp_json.
func jsonSpans(i int) []byte {
	return fmt.Appendf(nil, `{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[{"traceId":"%032x","spanId":"%016x","name":"llm_request","startTimeUnixNano":"%d","endTimeUnixNano":"%d"}]}]}]}`,
		i+1, i+1, base.UnixNano(), base.UnixNano()+1000)
}

// protoSpans is the same span as otlp_proto.
func protoSpans(i int) []byte {
	id := make([]byte, 16)
	id[15] = byte(i + 1)
	id[14] = byte((i + 1) >> 8)
	return spansMsg(&tracepb.Span{TraceId: id, SpanId: []byte{0, 0, 0, 0, 0, 0, 0, byte(i + 1)}, Name: "llm_request",
		StartTimeUnixNano: uint64(base.UnixNano()), EndTimeUnixNano: uint64(base.UnixNano() + 1000)})
}

func TestUndecodableSource(t *testing.T) {
	for _, tc := range []struct {
		name string
		// bad reports whether message i of the spans topic is otlp_json
		// (or garbage, with garbage) on the otlp_proto source.
		bad      func(i int) bool
		garbage  bool
		messages int
		want     bool // one report, for the spans source
		read     int  // its Read
	}{
		{name: "all json", bad: func(int) bool { return true }, messages: 300, want: true, read: 51},
		{name: "garbage", bad: func(int) bool { return true }, garbage: true, messages: 60, want: true, read: 51},
		{name: "majority late in the window", bad: func(i int) bool { return i >= 40 }, messages: 100, want: true, read: 91},
		{name: "exactly half", bad: func(i int) bool { return i%2 == 0 }, messages: 300},
		{name: "bad after the first 100", bad: func(i int) bool { return i >= 100 }, messages: 400},
		{name: "a few bad", bad: func(i int) bool { return i%10 == 0 }, messages: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var log undecodableLog
			h := newHarness(t, 1, func(c *Config) { c.OnUndecodable = log.report; c.FlushAfter = -1 })
			for i := range tc.messages {
				v := protoSpans(i)
				switch {
				case tc.bad(i) && tc.garbage:
					v = []byte("\xff\xffnot otlp at all")
				case tc.bad(i):
					v = jsonSpans(i)
				}
				h.feed(inSpans, nil, v)
				// The logs topic is fine: never reported.
				h.feed(inLogs, nil, logsMsg())
			}
			got := log.reports()
			if !tc.want {
				if len(got) != 0 {
					t.Fatalf("reported %+v", got)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d reports, want 1: %+v", len(got), got)
			}
			u := got[0]
			if u.Source.Topic != "otlp_spans" || u.Source.Encoding != otlp.EncodingProto || u.Failed != DecodeProbeMessages/2+1 || u.Read != tc.read || u.Example == "" || u.OtherEncoding == tc.garbage {
				t.Errorf("report %+v", u)
			}
			if dlq := len(h.out("braid.dlq")); dlq < u.Failed {
				t.Errorf("%d records in the DLQ, %d reported", dlq, u.Failed)
			}
		})
	}
}

// The first DecodeProbeMessages messages of a source are counted over all
// of the stage's tasks, and reported once.
func TestUndecodableAcrossTasks(t *testing.T) {
	var log undecodableLog
	cfg := Config{Partitions: 2, IdleGap: time.Second, AllowedLateness: 10 * time.Second, FlushAfter: -1, OnUndecodable: log.report}
	st, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h0, h1 := newStageHarness(t, st, 0), newStageHarness(t, st, 1)
	for i := range 25 {
		h0.feed(inSpans, nil, jsonSpans(i))
		h1.feed(inSpans, nil, jsonSpans(i))
	}
	if got := log.reports(); len(got) != 0 {
		t.Fatalf("reported after 50 failures: %+v", got)
	}
	h1.feed(inSpans, nil, jsonSpans(25))
	if got := log.reports(); len(got) != 1 || got[0].Failed != 51 || got[0].Read != 51 || !got[0].OtherEncoding {
		t.Fatalf("reports %+v, want one at 51 failures of 51", got)
	}
	for i := range 100 {
		h0.feed(inSpans, nil, jsonSpans(i))
	}
	if got := log.reports(); len(got) != 1 {
		t.Fatalf("%d reports, want 1", len(got))
	}
}
