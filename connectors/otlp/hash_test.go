package otlp

import (
	"bytes"
	"hash/fnv"
	"math/rand/v2"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func fnv32a(b []byte) uint32 {
	h := fnv.New32a()
	h.Write(b)
	return h.Sum32()
}

func TestHashPartitionMatchesKgo(t *testing.T) {
	kgoHash := kgo.SaramaCompatHasher(fnv32a)
	r := rand.New(rand.NewPCG(1, 2))
	check := func(key []byte, n int32) {
		t.Helper()
		want := int32(kgoHash(key, int(n)))
		if got := HashPartition(key, n); got != want {
			t.Fatalf("HashPartition(%x, %d) = %d, kgo %d", key, n, got, want)
		}
		if got := HashPartition(key, n); got < 0 || got >= n {
			t.Fatalf("HashPartition(%x, %d) = %d out of range", key, n, got)
		}
	}
	ns := []int32{1, 2, 3, 4, 5, 7, 12, 16, 64, 100, 1000, 1<<31 - 1}
	for range 20000 {
		key := make([]byte, r.IntN(40))
		for i := range key {
			key[i] = byte(r.Uint32())
		}
		if r.IntN(2) == 0 {
			var id [16]byte
			for i := range id {
				id[i] = byte(r.Uint32())
			}
			key = AppendTraceIDHex(nil, id)
		}
		check(key, ns[r.IntN(len(ns))])
	}
	// fnv1a_32(02 57 96 df 4d) = 0x80000000: int32 is math.MinInt32, whose
	// abs overflows. Sarama/kgo take the remainder first, then negate it.
	minKey := []byte{0x02, 0x57, 0x96, 0xdf, 0x4d}
	if fnv32a(minKey) != 0x80000000 {
		t.Fatal("test key does not hash to 0x80000000")
	}
	for _, n := range ns {
		check(minKey, n)
	}
	if HashPartition(minKey, 3) != 2 || HashPartition(minKey, 4) != 0 {
		t.Fatal("MinInt32 hash")
	}
	check([]byte{}, 4)
	if HashPartition([]byte("x"), 0) != 0 || HashPartition([]byte("x"), -3) != 0 {
		t.Fatal("n <= 0 must give 0")
	}
	if a := testing.AllocsPerRun(100, func() { HashPartition(minKey, 4) }); a != 0 {
		t.Fatalf("%v allocs", a)
	}
}

func TestTraceIDHex(t *testing.T) {
	id := [16]byte{0xab, 0x09, 0xbb, 0xe5, 0xbc, 0x0a, 0x95, 0x2c, 0x3d, 0x8f, 0x9d, 0x38, 0xc8, 0x54, 0xd8, 0x61}
	s := AppendTraceIDHex([]byte("k="), id)
	if string(s) != "k=ab09bbe5bc0a952c3d8f9d38c854d861" {
		t.Fatalf("%s", s)
	}
	if got, ok := ParseTraceIDHex(s[2:]); !ok || got != id {
		t.Fatal("round trip")
	}
	if got, ok := ParseTraceIDHex(bytes.ToUpper(s[2:])); !ok || got != id {
		t.Fatal("upper case")
	}
	if got, ok := ParseTraceIDHex([]byte("00000000000000000000000000000000")); !ok || got != ([16]byte{}) {
		t.Fatal("zero id must parse")
	}
	for _, bad := range []string{"", "ab09", "ab09bbe5bc0a952c3d8f9d38c854d86", "ab09bbe5bc0a952c3d8f9d38c854d8610", "zb09bbe5bc0a952c3d8f9d38c854d861", "ab09bbe5bc0a952c3d8f9d38c854d8 1"} {
		if _, ok := ParseTraceIDHex([]byte(bad)); ok {
			t.Errorf("ParseTraceIDHex(%q) ok", bad)
		}
	}
	buf := make([]byte, 0, 32)
	if a := testing.AllocsPerRun(100, func() { buf = AppendTraceIDHex(buf[:0], id) }); a != 0 {
		t.Fatalf("%v allocs", a)
	}
}
