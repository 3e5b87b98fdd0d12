package semconv

import "testing"

// FuzzWire feeds arbitrary bytes to every wire reader: none may panic, and
// Lookup agrees with AppendAttrs on the first value of each key.
func FuzzWire(f *testing.F) {
	for _, m := range append(detailedRequest(f), vllmRequest(f)...) {
		if m.span != nil {
			f.Add(m.span)
		} else {
			f.Add(m.log)
		}
		f.Add(m.res)
	}
	for _, m := range verdictMembers(f) {
		f.Add(m)
	}
	f.Add([]byte{0x4a, 0x05, 0x0a, 0x01, 'k', 0x12, 0x00})
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, field := range []int{1, 6, 7, 9} {
			kvs := AppendAttrs(nil, b, protoNum(field))
			seen := map[string]bool{}
			for _, kv := range kvs {
				if seen[kv.Key] {
					continue
				}
				seen[kv.Key] = true
				// Lookup returns the first attribute of the key, which
				// AppendAttrs skips when it is not a scalar.
				v, ok := LookupValue(b, protoNum(field), kv.Key)
				if !ok {
					t.Fatalf("field %d key %q: LookupValue missed it", field, kv.Key)
				}
				if s, _ := Lookup(b, protoNum(field), kv.Key); v.IsScalar() && s != kv.Value {
					t.Fatalf("field %d key %q: Lookup = %q; AppendAttrs %q", field, kv.Key, s, kv.Value)
				}
			}
		}
		ids := DefaultRequestIDs()
		id, ok := ids.FromLog(b)
		if ok != ids.hasLogID(b) || (ok && id == "") {
			t.Fatalf("FromLog = %q, %v; hasLogID disagrees or empty id", id, ok)
		}
		if id, ok := ids.FromSpan(b); ok && id == "" {
			t.Fatal("FromSpan: empty id")
		}
		var d Deriver
		d.AddSpan(b, b)
		d.AddLog(b, b)
		d.Derived()
	})
}
