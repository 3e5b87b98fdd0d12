package fuse

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/braidlabs/braid/connectors/otlp"
)

// DecodeProbeMessages is how many of the first messages of each source the
// stage watches for decode failures (Config.OnUndecodable).
const DecodeProbeMessages = 100

// Undecodable reports a source most of whose first messages do not decode:
// more than half of the first DecodeProbeMessages, all tasks together.
type Undecodable struct {
	Source Source
	// Failed of the first Read messages of the source failed to decode
	// (Failed is DecodeProbeMessages/2+1 when reported).
	Failed, Read int
	// Example is the cause of the first failure ("invalid wire type 7 at
	// byte 0").
	Example string
	// OtherEncoding is set when that first failing message decodes in the
	// other encoding (otlp_json for otlp_proto, and the other way round):
	// the source's Encoding is most likely wrong.
	OtherEncoding bool
}

// decodeProbe counts the decode failures of one source over its first
// DecodeProbeMessages messages, across the stage's tasks.
type decodeProbe struct {
	read, failed atomic.Int64
	first        atomic.Pointer[firstFailure]
}

type firstFailure struct {
	cause         string
	otherEncoding bool
}

// probing reports whether source i is still in its first
// DecodeProbeMessages messages: one atomic load per message after that.
func (s *Stage) probing(i int) bool {
	return s.probes[i].read.Load() < DecodeProbeMessages
}

// probeDecode counts one message of source i whose decode returned err,
// and calls OnUndecodable at the failure that makes a majority of the
// first DecodeProbeMessages.
func (s *Stage) probeDecode(i int, value []byte, err error) {
	pr := &s.probes[i]
	n := pr.read.Add(1)
	if n > DecodeProbeMessages || err == nil {
		return
	}
	if pr.first.Load() == nil {
		src := s.cfg.Sources[i]
		other := otlp.EncodingJSON
		if src.Encoding == otlp.EncodingJSON {
			other = otlp.EncodingProto
		}
		// Once per source: a decoder of its own, not the task's, whose
		// items the caller may still hold.
		_, oerr := otlp.NewDecoder().Decode(src.Signal, other, value)
		pr.first.CompareAndSwap(nil, &firstFailure{cause: decodeCause(err), otherEncoding: oerr == nil})
	}
	if f := pr.failed.Add(1); f == DecodeProbeMessages/2+1 && s.cfg.OnUndecodable != nil {
		first := pr.first.Load()
		s.cfg.OnUndecodable(Undecodable{Source: s.cfg.Sources[i], Failed: int(f), Read: int(n),
			Example: first.cause, OtherEncoding: first.otherEncoding})
	}
}

// decodeCause is a decode error without the signal and encoding that the
// report names anyway.
func decodeCause(err error) string {
	var de *otlp.DecodeError
	if !errors.As(err, &de) {
		return err.Error()
	}
	if de.Offset >= 0 {
		return de.Reason + " at byte " + strconv.Itoa(de.Offset)
	}
	return de.Reason
}
