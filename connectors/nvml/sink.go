package nvml

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	metricspb "go.opentelemetry.io/proto/otlp/metrics/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Encoding of a Kafka record value, named as in the Collector's Kafka
// exporter.
type Encoding string

const (
	// EncodingProto: a serialized MetricsData. The default.
	EncodingProto Encoding = "otlp_proto"
	// EncodingJSON: OTLP/JSON (lowerCamelCase keys, enums as integers,
	// 64-bit integers as decimal strings).
	EncodingJSON Encoding = "otlp_json"
)

// DefaultTopic is the Collector's default metrics topic.
const DefaultTopic = "otlp_metrics"

// ParseEncoding checks s.
func ParseEncoding(s string) (Encoding, error) {
	switch e := Encoding(s); e {
	case EncodingProto, EncodingJSON:
		return e, nil
	}
	return "", fmt.Errorf("nvml: encoding %q is neither %s nor %s", s, EncodingProto, EncodingJSON)
}

var jsonOpts = protojson.MarshalOptions{UseEnumNumbers: true}

// Marshal encodes md as enc.
func (enc Encoding) Marshal(md *metricspb.MetricsData) ([]byte, error) {
	switch enc {
	case EncodingProto, "":
		return proto.Marshal(md)
	case EncodingJSON:
		return jsonOpts.Marshal(md)
	}
	return nil, fmt.Errorf("nvml: unknown encoding %q", enc)
}

// KafkaSink writes each MetricsData as one record with a null key, as the
// Collector's Kafka exporter does without partitioning options.
type KafkaSink struct {
	client *kgo.Client
	topic  string
	enc    Encoding
}

// NewKafkaSink writes to topic (default DefaultTopic) through client, which
// the caller owns and closes.
func NewKafkaSink(client *kgo.Client, topic string, enc Encoding) *KafkaSink {
	if topic == "" {
		topic = DefaultTopic
	}
	if enc == "" {
		enc = EncodingProto
	}
	return &KafkaSink{client: client, topic: topic, enc: enc}
}

// Export produces md and waits for the broker's acknowledgement or for ctx
// to end, whichever comes first. franz-go does not give up on a record
// waiting for the metadata of an unreachable cluster when its context
// ends, so Export stops waiting instead: the record stays in the client's
// buffer and may still be delivered later.
func (k *KafkaSink) Export(ctx context.Context, md *metricspb.MetricsData) error {
	v, err := k.enc.Marshal(md)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	k.client.Produce(ctx, &kgo.Record{Topic: k.topic, Value: v}, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("nvml: produce to %s: %w", k.topic, err)
	}
	return nil
}

// HTTPSink posts each MetricsData to an OTLP/HTTP receiver as
// application/x-protobuf.
type HTTPSink struct {
	url    string
	client *http.Client
}

// NewHTTPSink posts to endpoint; an endpoint without a path ("http://host:4318")
// gets /v1/metrics. client nil means http.DefaultClient.
func NewHTTPSink(endpoint string, client *http.Client) *HTTPSink {
	if client == nil {
		client = http.DefaultClient
	}
	u := strings.TrimRight(endpoint, "/")
	if i := strings.Index(u, "://"); i < 0 || !strings.Contains(u[i+3:], "/") {
		u += "/v1/metrics"
	}
	return &HTTPSink{url: u, client: client}
}

// URL is where Export posts.
func (h *HTTPSink) URL() string { return h.url }

// Export posts md; a status other than 2xx is an error with the body's
// start.
func (h *HTTPSink) Export(ctx context.Context, md *metricspb.MetricsData) error {
	body, err := proto.Marshal(md)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("nvml: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("nvml: post %s: %w", h.url, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("nvml: post %s: %s: %s", h.url, resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}
