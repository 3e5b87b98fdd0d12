// Package wirecheck checks protobuf bytes that braid writes by hand (with
// protowire) against the descriptors generated from the .proto files, for
// the tests of the code that writes them: a field number or wire type
// that the schema does not have fails there, not in a consumer.
package wirecheck
