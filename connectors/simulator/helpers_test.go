package simulator

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"regexp"
	"testing"

	logspb "go.opentelemetry.io/proto/otlp/logs/v1"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

var hexID = regexp.MustCompile(`"(traceId|spanId|parentSpanId)":"([0-9a-fA-F]*)"`)

// hexIDsToBase64 turns OTLP/JSON's hex ids into the base64 that protojson
// expects.
func hexIDsToBase64(js []byte) ([]byte, error) {
	var err error
	out := hexID.ReplaceAllFunc(js, func(m []byte) []byte {
		sub := hexID.FindSubmatch(m)
		raw, e := hex.DecodeString(string(sub[2]))
		if e != nil {
			err = e
			return m
		}
		return fmt.Appendf(nil, `"%s":"%s"`, sub[1], base64.StdEncoding.EncodeToString(raw))
	})
	return out, err
}

// newFor returns an empty message of the type written to the given signal.
func newFor(signal string) proto.Message {
	switch signal {
	case "spans":
		return &tracepb.TracesData{}
	case "logs":
		return &logspb.LogsData{}
	case "metrics":
		return &metricspb.MetricsData{}
	}
	panic("unknown signal " + signal)
}

// decode reads one record value with the otlp Go types.
// decodeMessage decodes a message the simulator wrote with cfg, failing
// the test when it does not decode.
func decodeMessage(t testing.TB, cfg Config, m Message) proto.Message {
	t.Helper()
	signal := map[string]string{cfg.Topics.Spans: "spans", cfg.Topics.Logs: "logs", cfg.Topics.Metrics: "metrics"}[m.Topic]
	msg, err := decode(signal, cfg.Encoding, m.Value)
	if err != nil {
		t.Fatalf("decode %s: %v", m.Topic, err)
	}
	return msg
}

func decode(signal, encoding string, value []byte) (proto.Message, error) {
	m := newFor(signal)
	switch encoding {
	case EncodingProto:
		return m, proto.Unmarshal(value, m)
	case EncodingJSON:
		js, err := hexIDsToBase64(value)
		if err != nil {
			return nil, err
		}
		return m, protojson.Unmarshal(js, m)
	}
	return nil, fmt.Errorf("unknown encoding %q", encoding)
}
