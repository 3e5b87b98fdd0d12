// Package wire reads the protobuf wire format the way braid's scanners do:
// the fields of a message one at a time (Next), OTLP's KeyValue and
// AnyValue (KeyValue, AnyValue, FirstAnyValue) and decimal integers sent
// as text (Atoi); and InsertLen, for writers that frame a message after
// writing it. The OTLP decoder, the semantic conventions, the fuse stage
// and the KV-cache detector all read through it.
//
// Nothing here allocates, and no input makes it panic: a malformed field
// ends a scan, and what was read before it stays. The slices returned
// alias the message and are valid as long as its bytes are.
//
// Field numbers are read as protowire.ConsumeTag reads them (1 to
// math.MaxInt32); a validating reader checks protowire.MaxValidNumber
// itself.
package wire
